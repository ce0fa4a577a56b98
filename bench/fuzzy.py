"""The fuzzy contamination advisory (lib/fuzzy.py) on planted edits and on clean prose.

    .venv/bin/python bench/fuzzy.py [--shingles 2 3] [--per-task 300] [--clean-mb 5] [--mb 50]

Eval items: the non-test splits of the five shared eval tasks (configs/shared-sample.yaml; the
in-repo fixture's when the shared data folder is absent). Recall: --per-task items of >= 8 words per
task, each with 1 (then 2) words replaced by a word drawn from the generated prose's vocabulary, at
uniformly drawn distinct positions, planted at a random word boundary of a generated document
(lib/gen_corpus, order-2 Markov prose over the shared books); found = that document is matched to
that task. The same planted documents go through the exact 13-gram scan (lib/contamination.py).
False positives: generated documents without plants (--clean-mb of text) matched to any item.
Seconds: index build, and the scan of --mb of generated prose (one process, one thread).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def eval_items() -> dict[str, list[str]]:
    from mix_assets.config import load_spec
    from mix_assets.lib import evals
    from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data, real_mix_config

    data = find_shared_data() or FIXTURE
    spec = load_spec(str(real_mix_config(Path(tempfile.mkdtemp(prefix="fuzzy-bench-")), data)))
    return {t.name: evals.load_task_items(t, spec.base_dir).items for t in spec.audit.tasks}


def prose(mb: float, seed: int) -> list[str]:
    from mix_assets.lib import gen_corpus as gc
    from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data

    data = find_shared_data() or FIXTURE
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    model = gc.MarkovModel.from_files(books, order=2)
    return gc.generate_bytes(model, int(mb * 1_000_000), seed=seed, near_dup_fraction=0.0).texts


def plant(items: dict[str, list[str]], docs: list[str], per_task: int, edits: int, seed: int):
    """(documents with one edited item planted each, their task) and the vocabulary edits draw from."""
    rng = np.random.default_rng(seed)
    vocab = sorted({w for d in docs[:200] for w in d.split()})
    out, truth = [], []
    for task, its in items.items():
        cand = [i for i, it in enumerate(its) if len(it.split()) >= 8]
        for i in rng.choice(cand, min(per_task, len(cand)), replace=False):
            words = its[i].split()
            for p in rng.choice(len(words), edits, replace=False):
                words[p] = vocab[rng.integers(len(vocab))]
            host = docs[rng.integers(len(docs))].split()
            at = int(rng.integers(len(host) + 1))
            out.append(" ".join(host[:at] + words + host[at:]))
            truth.append(task)
    return out, truth


def found_by(index, docs: list[str], truth: list[str]) -> np.ndarray:
    from mix_assets.lib import fuzzy

    m = fuzzy.scan_texts(index, docs)
    hit = np.zeros(len(docs), bool)
    for d, i in zip(m.doc, m.item):
        hit[d] |= index.tasks[index.item_task[i]] == truth[d]
    return hit


def exact_found(items: dict[str, list[str]], docs: list[str], truth: list[str]) -> np.ndarray:
    from mix_assets.lib import contamination as ct

    reg = ct.Registry.build({t: ct.task_ngrams(v) for t, v in items.items()})
    counts = reg.scan_texts(docs)
    return np.array([counts[d, reg.tasks.index(t)] > 0 for d, t in enumerate(truth)])


def main() -> None:
    from mix_assets.lib import fuzzy

    ap = argparse.ArgumentParser()
    ap.add_argument("--shingles", type=int, nargs="+", default=[2, 3])
    ap.add_argument("--per-task", type=int, default=300)
    ap.add_argument("--clean-mb", type=float, default=5)
    ap.add_argument("--mb", type=float, default=0)
    ap.add_argument("--num-perm", type=int, default=32)
    args = ap.parse_args()
    items = eval_items()
    print("items:", {t: len(v) for t, v in items.items()})
    clean = prose(args.clean_mb, seed=1)
    for k in args.shingles:
        t0 = time.perf_counter()
        index = fuzzy.build_index(items, fuzzy.Params(shingle=k, num_perm=args.num_perm))
        print(f"\nshingle {k}: index {time.perf_counter() - t0:.2f} s, {index.items} items indexed, "
              f"{index.rep_keys.size} representative shingles, {index.post_item.size} postings")
        for edits in (0, 1, 2):
            docs, truth = plant(items, clean, args.per_task, edits, seed=10 + edits)
            hit, ex = found_by(index, docs, truth), exact_found(items, docs, truth)
            for task in items:
                sel = np.array([t == task for t in truth])
                print(f"  edits {edits} {task:15s} planted {sel.sum():4d}  fuzzy {hit[sel].mean():.3f}  "
                      f"13-gram {ex[sel].mean():.3f}  fuzzy-not-13gram {(hit & ~ex)[sel].sum()}")
            print(f"  edits {edits} ALL             planted {len(docs):4d}  fuzzy {hit.mean():.3f}  13-gram {ex.mean():.3f}")
        t0 = time.perf_counter()
        fp = fuzzy.scan_texts(index, clean)
        secs = time.perf_counter() - t0
        mb = sum(len(d.encode()) for d in clean) / 1e6
        print(f"  clean prose: {len(clean)} docs, {mb:.1f} MB, matched docs {len(np.unique(fp.doc))} "
              f"(max J {fp.jaccard.max() if fp.jaccard.size else 0:.3f}), {secs:.2f} s")
        if args.mb:
            big = prose(args.mb, seed=2)
            bmb = sum(len(d.encode()) for d in big) / 1e6
            t0 = time.perf_counter()
            for s in range(0, len(big), 1024):
                fuzzy.scan_texts(index, big[s:s + 1024])
            print(f"  scan {bmb:.1f} MB: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
