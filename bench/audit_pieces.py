"""What a reuse of `shards_audit_clean`'s work could reuse between two published revisions: the share of the new
revision's (sample, document) pieces, and of its whole documents, whose token ids also occur in the old one.

    bench/audit_pieces.py OLD_REVISION NEW_REVISION

The audit (stages/audit/published.py) decodes and scans each (sample, document) piece with a carry; a result
keyed by a piece's ids can only be reused where the new revision cuts a document at the same sample boundaries
as the old, a result keyed by a whole document's ids wherever the document is unchanged (bench/results/
incremental.md, "the checks after token_shards in a rebuild", for the design and what it would change). Both
revisions are local folders (a published `rev-*` or a storage root's `mix/`) with a separator token. Pieces and
documents are compared by an xxh3-128 of their ids; shares by count and by tokens.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _split_tokens(rev: Path, split: str):
    import numpy as np

    m = json.loads((rev / "manifest.json").read_text())
    sep, sample_len = m["packing"]["separator_id"], m["packing"]["sample_len"]
    if sep is None:
        raise SystemExit(f"{rev}: no separator token (packing.separator null): documents are not in the bytes")
    parts = [np.fromfile(rev / e["path"], dtype=m["dtype"]) for e in m["splits"][split]["shards"]]
    return (np.concatenate(parts) if parts else np.zeros(0, m["dtype"])), sep, sample_len


def _segments(arr, cuts) -> tuple[list[int], list[int]]:
    """(xxh3-128 of arr[a:b], b - a) for consecutive non-empty [a, b) of `cuts`."""
    import xxhash

    keys, sizes = [], []
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        if b > a:
            keys.append(xxhash.xxh3_128_intdigest(arr[a:b].tobytes()))
            sizes.append(b - a)
    return keys, sizes


def pieces(arr, sep: int, sample_len: int):
    """The audit's pieces: every sample cut after each separator (a piece keeps its separator)."""
    import numpy as np

    ends = np.flatnonzero(arr == sep) + 1
    return _segments(arr, np.unique(np.concatenate([np.arange(0, len(arr) + 1, sample_len), ends, [len(arr)]])))


def documents(arr, sep: int):
    """Whole documents (each with its separator; the split's last one may be cut by the dropped tail)."""
    import numpy as np

    return _segments(arr, np.unique(np.concatenate([[0], np.flatnonzero(arr == sep) + 1, [len(arr)]])))


def compare(old: Path, new: Path) -> dict:
    import numpy as np

    out = {}
    for split in ("train", "val"):
        a, sep, sample_len = _split_tokens(old, split)
        b, _, _ = _split_tokens(new, split)
        row = {"sample_len": sample_len}
        for name, fn in (("pieces", lambda x: pieces(x, sep, sample_len)), ("documents", lambda x: documents(x, sep))):
            have = set(fn(a)[0])
            keys, sizes = fn(b)
            found = np.array([k in have for k in keys], bool)
            sizes = np.asarray(sizes, np.int64)
            row[name] = {"count": len(keys), "found": int(found.sum()), "tokens": int(sizes.sum()),
                         "tokens_found": int(sizes[found].sum())}
        doc_sizes = np.asarray(documents(b, sep)[1], np.int64)
        row["document_tokens_mean"] = float(doc_sizes.mean()) if len(doc_sizes) else 0.0
        row["document_tokens_median"] = float(np.median(doc_sizes)) if len(doc_sizes) else 0.0
        out[split] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="the older revision's folder (its manifest.json and shards)")
    ap.add_argument("new", type=Path, help="the newer revision's folder")
    a = ap.parse_args()
    for split, r in compare(a.old, a.new).items():
        p, d = r["pieces"], r["documents"]
        print(f"{split}: pieces found in the old revision {p['found']:,} of {p['count']:,} "
              f"({p['found'] / max(p['count'], 1):.3f}; by tokens {p['tokens_found'] / max(p['tokens'], 1):.3f}); "
              f"whole documents {d['found']:,} of {d['count']:,} ({d['found'] / max(d['count'], 1):.3f}; by tokens "
              f"{d['tokens_found'] / max(d['tokens'], 1):.3f}); tokens per document mean "
              f"{r['document_tokens_mean']:.0f}, median {r['document_tokens_median']:.0f}; sample_len {r['sample_len']}")


if __name__ == "__main__":
    main()
