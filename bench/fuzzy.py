"""The fuzzy contamination advisory (stages/audit/fuzzy.py) on planted edits and on clean prose.

    .venv/bin/python bench/fuzzy.py [--shingles 2 3] [--per-task 300] [--clean-mb 5] [--mb 50]

Eval items: the non-test splits of the five shared eval tasks (configs/shared-sample.yaml; the
in-repo fixture's when the shared data folder is absent). Recall: --per-task items of >= 8 words per
task, each with 1 (then 2) words replaced by a word drawn from the generated prose's vocabulary, at
uniformly drawn distinct positions, planted at a random word boundary of a generated document
(../mix_assets_tests/support/gen_corpus, order-2 Markov prose over the shared books); found = that document is matched to
that task. The same planted documents go through the exact 13-gram scan (stages/audit/contamination.py).
False positives: generated documents without plants (--clean-mb of text) matched to any item.
Seconds: index build, and the scan of --mb of generated prose (one process, one thread).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    import pyarrow as pa

    from mix_assets.stages.audit import contamination as ct
    from mix_assets.stages.audit import fuzzy
    from mix_assets_tests.support.fuzzy_plants import eval_items, exact_found, found, plant, prose

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
            docs, truth, lengths = plant(items, clean, args.per_task, edits, seed=10 + edits)
            hit, ex = found(index, docs, truth), exact_found(items, docs, truth)
            for task in items:
                sel = np.array([t == task for t in truth])
                print(f"  edits {edits} {task:15s} planted {sel.sum():4d}  fuzzy {hit[sel].mean():.3f}  "
                      f"13-gram {ex[sel].mean():.3f}  fuzzy-not-13gram {(hit & ~ex)[sel].sum()}")
            short = np.array(lengths) < 27
            print(f"  edits {edits} items < 27 words   planted {short.sum():4d}  fuzzy {hit[short].mean():.3f}  "
                  f"13-gram {ex[short].mean():.3f}")
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
            batches = [pa.array(big[s:s + 1024], pa.large_string()) for s in range(0, len(big), 1024)]
            t0, c0 = time.perf_counter(), time.process_time()
            n = sum(len(fuzzy.scan_texts(index, b).doc) for b in batches)
            print(f"  fuzzy scan {bmb:.1f} MB, {len(big)} docs: {time.perf_counter() - t0:.2f} s wall, "
                  f"{time.process_time() - c0:.2f} s CPU, {n} matches")
            reg = ct.Registry.build({t: ct.task_ngrams(v) for t, v in items.items()})
            t0, c0 = time.perf_counter(), time.process_time()
            for b in batches:
                reg.scan_texts(b)
            print(f"  13-gram scan of the same batches: {time.perf_counter() - t0:.2f} s wall, "
                  f"{time.process_time() - c0:.2f} s CPU")


if __name__ == "__main__":
    main()
