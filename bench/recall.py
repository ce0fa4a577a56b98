"""Near-duplicate recall AT the threshold: planted near-copies at true Jaccard 0.80-0.85 (issue 13 §4).

    .venv/bin/python bench/recall.py [--docs 20000] [--seed 1] [--order 2]

Corpus: ../mix_assets_tests/support/gen_corpus.py, an order-2 word Markov chain over the shared books (Gutenberg, Sherlock
Holmes, Botchan, State of the Union; the fixture's when the shared data is absent), log-normal
lengths (median 330 words); 10 % of the documents get a near-copy at a true 5-word-shingle Jaccard
drawn uniformly from [0.80, 0.85] (measured exactly), plus, as negative controls, `--controls` more
documents with a copy at [0.74, 0.7999].

Compared on the same signatures, in the same run:
  old  = b, r from datasketch's integral at the threshold (0.05 / 0.95 -> b=16, r=8), candidates
         confirmed by the estimated Jaccard (share of equal signature values) >= 0.8;
  new  = lsh.recall_params (P(miss | J = 0.8) <= 1e-6 -> b=27, r=4), candidates verified by exact
         shingle-set Jaccard (what dedup_keys runs).
Prints recall (planted pairs in one cluster), controls wrongly joined, candidate pairs, seconds,
and the peak of the shingle sets held for verification.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data  # noqa: E402


def books() -> list[Path]:
    data = find_shared_data() or FIXTURE
    names = ["gutenberg", "sherlock_holmes", "botchan", "nltk_state_union"]
    return sorted(p for n in names for p in (data / "sources" / n).glob("*.txt"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=20000, help="documents before the planted copies")
    ap.add_argument("--controls", type=int, default=2000, help="documents with a copy at J 0.74-0.7999")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--order", type=int, default=2, help="Markov order (1 for the small fixture)")
    a = ap.parse_args()

    from mix_assets_tests.support import gen_corpus as gc
    from mix_assets.stages.dedup import lsh
    from mix_assets.stages.dedup import minhash as mh
    from mix_assets.stages.dedup.dedup import DedupParams

    t = time.time()
    model = gc.MarkovModel.from_files(books(), order=a.order)
    above = gc.generate(model, a.docs, seed=a.seed)
    below = gc.generate(model, a.controls, seed=a.seed + 1, near_dup_fraction=1.0, jaccard_range=(0.74, 0.7999))
    texts = above.texts + below.texts
    off = len(above.texts)
    print(f"corpus: {len(texts):,} docs, {(above.n_bytes + below.n_bytes) / 1e6:.1f} MB, {len(above.pairs):,} pairs "
          f"at J {above.jaccard.min():.3f}-{above.jaccard.max():.3f}, {len(below.pairs):,} controls at "
          f"{below.jaccard.min():.3f}-{below.jaccard.max():.3f} ({time.time() - t:.1f} s, order {a.order}, "
          f"{len(model.stream):,} training words)")
    t = time.time()
    signed = mh.sign_texts(texts)
    print(f"signatures: {time.time() - t:.1f} s")
    n = len(texts)
    ids = [f"d{i:08d}" for i in range(n)]
    held = [0]

    def sets(need: np.ndarray):
        v, o = mh.shingle_sets([texts[i] for i in need])
        held[0] = max(held[0], v.nbytes + o.nbytes)
        return v, o

    p = DedupParams()
    for name, (b, r), verify in (("old", lsh.optimal_params(0.8, 128, p.fp_weight, p.fn_weight), None),
                                 ("new", p.bands_rows, sets)):
        t = time.time()
        res = lsh.dedup(ids, signed.exact_keys, signed.signatures, signed.n_shingles, np.ones(n, np.int64),
                        np.zeros(n, np.int64), b, r, 0.8, shingle_sets=verify)
        dt = time.time() - t
        k = res.kept_index
        hit = k[above.pairs[:, 0]] == k[above.pairs[:, 1]]
        wrong = k[off + below.pairs[:, 0]] == k[off + below.pairs[:, 1]]
        print(f"{name}: b={b} r={r} {res.stats['verification']:>9}: recall {hit.sum()}/{len(hit)} = {hit.mean():.2%}; "
              f"controls joined {wrong.sum()}/{len(wrong)}; candidates {res.stats['candidate_pairs']:,}; "
              f"{dt:.2f} s" + (f"; shingle sets held {held[0] / 1e6:.1f} MB" if verify else ""))


if __name__ == "__main__":
    main()
