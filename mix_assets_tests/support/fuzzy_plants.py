"""Eval items with words changed, planted in generated prose: the fuzzy advisory's recall and
false-positive material (mix_assets_tests/stages/audit/test_fuzzy.py, bench/fuzzy.py).

Items: the non-test splits of the shared data's five eval tasks (configs/shared-sample.yaml), or the
in-repo fixture's task when the shared data folder is absent. Prose: ../mix_assets_tests/support/gen_corpus's order-2 Markov
chain over the same folder's books, without planted near-copies.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data, real_mix_config


def data_dir() -> Path:
    return find_shared_data() or FIXTURE


def eval_items(data: Path | None = None) -> dict[str, list[str]]:
    """Every task's reference items, read by stages/audit/evals (test splits refused) from `data`'s mix."""
    from mix_assets.config import load_spec
    from mix_assets.stages.audit import evals

    data = data or data_dir()
    with tempfile.TemporaryDirectory(prefix="fuzzy-items-") as tmp:  # only the config file lives here
        spec = load_spec(str(real_mix_config(Path(tmp), data)))
        return {t.name: evals.load_task_items(t, spec.base_dir).items for t in spec.audit.tasks}


def prose(mb: float, seed: int, data: Path | None = None) -> list[str]:
    """About `mb` MB of generated documents (no near-copies)."""
    from mix_assets_tests.support import gen_corpus as gc

    data = data or data_dir()
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    model = gc.MarkovModel.from_files(books, order=2)
    return gc.generate_bytes(model, int(mb * 1_000_000), seed=seed, near_dup_fraction=0.0).texts


def plant(items: dict[str, list[str]], hosts: list[str], per_task: int, edits: int, seed: int,
          min_words: int = 8) -> tuple[list[str], list[str], list[int]]:
    """Up to `per_task` items of >= `min_words` words per task, each with `edits` words (distinct
    positions drawn uniformly) replaced by a word of the hosts' vocabulary, inserted at a random word
    boundary of a random host. Returns (documents, their task, the item's word count)."""
    rng = np.random.default_rng(seed)
    vocab = sorted({w for d in hosts[:200] for w in d.split()})
    docs, tasks, lengths = [], [], []
    for task, its in items.items():
        cand = [i for i, it in enumerate(its) if len(it.split()) >= min_words]
        for i in rng.choice(cand, min(per_task, len(cand)), replace=False):
            words = its[i].split()
            for p in rng.choice(len(words), edits, replace=False):
                words[p] = vocab[rng.integers(len(vocab))]
            host = hosts[rng.integers(len(hosts))].split()
            at = int(rng.integers(len(host) + 1))
            docs.append(" ".join(host[:at] + words + host[at:]))
            tasks.append(task)
            lengths.append(len(words))
    return docs, tasks, lengths


def found(index, docs: list[str], tasks: list[str]) -> np.ndarray:
    """Per planted document: the fuzzy scan matched it to an item of its task."""
    from mix_assets.stages.audit import fuzzy

    m = fuzzy.scan_texts(index, docs)
    hit = np.zeros(len(docs), bool)
    for d, i in zip(m.doc, m.item):
        hit[d] |= index.tasks[index.item_task[i]] == tasks[d]
    return hit


def exact_found(items: dict[str, list[str]], docs: list[str], tasks: list[str]) -> np.ndarray:
    """Per planted document: the 13-gram audit (stages/audit/contamination.py) counted an overlap with its task."""
    from mix_assets.stages.audit import contamination as ct

    reg = ct.Registry.build({t: ct.task_ngrams(v) for t, v in items.items()})
    counts = reg.scan_texts(docs)
    return np.array([counts[d, reg.tasks.index(t)] > 0 for d, t in enumerate(tasks)])
