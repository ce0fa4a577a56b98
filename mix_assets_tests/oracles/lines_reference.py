"""Plain-Python line dedup (no polars, numpy or numba): what stages/lines/kernels.py computes, one document and
one line at a time, for test_lines to compare against on generated corpora."""

from __future__ import annotations

import xxhash

# Unicode White_Space: what Rust's str::trim (and polars' strip_chars()) strips; Python's str.strip() would also
# strip U+001C-U+001F, which are not White_Space
WS = "\t\n\v\f\r \x85\xa0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B)) + "\u2028\u2029\u202f\u205f\u3000"


def key(line: str) -> int:
    return xxhash.xxh64_intdigest(line.strip(WS).encode())


def counts(docs: list[str], min_chars: int) -> dict[int, int]:
    """{line key: documents holding it} over the counted lines, each once per document."""
    out: dict[int, int] = {}
    for text in docs:
        for k in {key(x) for x in text.split("\n") if len(x.strip(WS)) >= min_chars}:
            out[k] = out.get(k, 0) + 1
    return out


def remove(docs: list[str], frequent: set[int], min_chars: int, min_kept_share: float, min_kept_chars: int):
    """[(new text, removed lines, dropped)] per document."""
    out = []
    for text in docs:
        lines = text.split("\n")
        gone = [len(x.strip(WS)) >= min_chars and key(x) in frequent for x in lines]
        if not any(gone):
            out.append((text, 0, False))
            continue
        chars = sum(len(x.strip(WS)) for x in lines)
        kept = sum(len(x.strip(WS)) for x, g in zip(lines, gone) if not g)
        out.append(("\n".join(x for x, g in zip(lines, gone) if not g), sum(gone),
                    kept < min_kept_share * chars or kept < min_kept_chars))
    return out
