"""Where dedup_keys' reduce spends its time, part by part, on a storage holding raw/<source> and the signature
files of part_a..part_d (e.g. bench/reduce_reuse.py's --folder/storage); CPU seconds of each part, warm (the
first repeat also pays the imports and numba's cached kernels), run as the reduce runs them:

    PYTHONPATH=$PWD /work/main/.venv/bin/python bench/reduce_profile.py <storage root> [--repeats 4]

Parts: the signature files' scalar columns and exact-key groups; banding (`lsh.candidate_pairs` over every
document, files opened per band as the reduce does); the candidates' text pass (`signatures.shingle_reader`)
and verification for all candidate documents, then for the pairs with a part_d document only (what the stored
pairs leave to compare when part_d alone changed), then for part_d's own candidate documents.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
NAMES = ["part_a", "part_b", "part_c", "part_d"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("storage")
    ap.add_argument("--repeats", type=int, default=4)
    a = ap.parse_args()
    import numpy as np

    from mix_assets.core import engine, tables
    from mix_assets.core.storage import Storage
    from mix_assets.stages.dedup import dedup, lsh
    from mix_assets.stages.dedup import signatures as sig

    st = Storage(a.storage)
    files, p, eng = tables.raw_files(st, NAMES), dedup.DedupParams(), engine.Engine(num_cpus=1)
    b, r = p.bands_rows
    res: dict = {}

    def tm(k, f):
        c = time.process_time()
        out = f()
        res.setdefault(k, []).append(time.process_time() - c)
        return out

    for _ in range(a.repeats):
        stored = sig.Stored([tables.file_at(st, dedup.signatures_key(n)) for n in NAMES], p.num_perm)
        first = dict(zip(NAMES, np.r_[0, np.cumsum(stored.rows)[:-1]].tolist()))
        tm("scalars + exact-key groups", lambda: lsh.key_groups(stored.read(sig.SCALARS).column("exact_key")
                                                                .combine_chunks()))
        lo, hi = tm("banding (27 bands, every document)", lambda: lsh.candidate_pairs(stored, None, b, r, 32, eng))
        with tempfile.TemporaryDirectory() as spill:
            read = sig.shingle_reader(files, first, p.shingle, spill, 8192, eng)
            d0 = first["part_d"]
            m = (lo >= d0) | (hi >= d0)
            for label, sel in (("all candidate pairs", np.ones(len(lo), bool)), ("pairs with part_d", m)):
                need = np.unique(np.concatenate([lo[sel], hi[sel]]))
                sets = tm(f"text pass: {label} ({len(need):,} documents)", lambda: read(need))
                ca, cb = np.searchsorted(need, lo[sel]), np.searchsorted(need, hi[sel])
                tm(f"verification: {label} ({int(sel.sum()):,} pairs)", lambda: sets.jaccard(ca, cb))
            own = np.unique(np.concatenate([lo, hi]))
            own = own[own >= d0]
            tm(f"text pass: part_d's own candidate documents ({len(own):,})", lambda: read(own))
    for k, v in res.items():
        print(f"| {k} | {' / '.join(f'{x:.2f}' for x in v[1:])} | {v[0]:.2f} |")


if __name__ == "__main__":
    main()
