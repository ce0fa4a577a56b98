"""Gopher repetition rules: Rae et al. 2021, arXiv 2112.11446, Table A1 (the thresholds that datatrove 0.10.1's
`gopher_repetition_filter.py` quotes in its docstring).

Its n-grams are rolling 64-bit keys over one flat token array of the batch (stages/filters/kernels.py). Its duplicate 5- to
10-gram rule is a greedy left-to-right scan that skips past each repeat, which has no bulk form: bulk upper
bounds (the characters of the tokens covered by repeated n-grams) clear most documents, and the scan runs per
document, on hashed n-grams, only for the rest (`FilterResult.python_docs`, timed in
`seconds["gopher_repetition:python_scan"]`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import polars as pl
import pyarrow as pa

from mix_assets.stages.filters.kernels import MIX, NGrams, SEP, key_groups, gt, later_repeats, ratio
from mix_assets.stages.filters.rule import Batch, Filter


@dataclass(frozen=True)
class GopherRepetitionFilter:
    """Gopher repetition rules (arXiv 2112.11446 Table A1): datatrove GopherRepetitionFilter,
    pipeline/filters/gopher_repetition_filter.py, same defaults. None / () switches a rule off."""

    enabled: bool = True
    dup_para_frac: Optional[float] = 0.3
    dup_para_char_frac: Optional[float] = 0.2
    dup_line_frac: Optional[float] = 0.3
    dup_line_char_frac: Optional[float] = 0.2
    top_n_grams: tuple = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))


def _top_ngram_chars(key: np.ndarray, doc: np.ndarray, chars: np.ndarray, n: int, ndoc: int) -> np.ndarray:
    """Per document: len(" ".join(g)) * count of its most frequent n-gram g (ties: the first seen)."""
    rows, starts = key_groups(key)
    cnt = np.diff(np.append(starts, len(key)))
    first = rows[starts]
    d = doc[first]
    cmax = np.zeros(ndoc, np.int64)
    np.maximum.at(cmax, d, cnt)
    best = np.full(ndoc, len(key), np.int64)
    top = cnt == cmax[d]
    np.minimum.at(best, d[top], first[top])
    has = best < len(key)
    out = np.zeros(ndoc, np.int64)
    out[has] = (chars[best[has]] + n - 1) * cmax[has]
    return out


def _per_doc_max(doc: np.ndarray, x: np.ndarray, ndoc: int) -> np.ndarray:
    """Max of x per document, 0 where none (doc sorted)."""
    out = np.zeros(ndoc, np.int64)
    if len(doc):
        at = np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))
        out[doc[at]] = np.maximum.reduceat(x, at)
    return out


def _top_ngram_fails(key: np.ndarray, doc: np.ndarray, chars: np.ndarray, n: int, limit: np.ndarray,
                     cap: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """(`_top_ngram_chars(...) > limit` per document, per document a bound on any n-gram's count). One plain
    sort of (document, key's high bits) gives each document's highest count; that count * the document's
    longest n-gram bounds the characters, and only documents over `limit` on the bound (~5 % here) need
    the first-seen tie-break. `cap`, a bound on the counts of a shorter n-gram size (an n-gram occurs at
    most as often as its prefix), clears documents before the sort."""
    ndoc = len(limit)
    out = np.zeros(ndoc, dtype=bool)
    longest = _per_doc_max(doc, chars, ndoc)
    cmax = np.zeros(ndoc, np.int64) if cap is None else cap.copy()
    if cap is not None:
        sub = ((longest + n - 1) * cap > limit)[doc]
        key, doc, chars = key[sub], doc[sub], chars[sub]
    if not len(key):
        return out, cmax
    shift = np.uint64(max(1, (ndoc - 1).bit_length()))
    s = np.sort((doc.astype(np.uint64) << (np.uint64(64) - shift)) | (key >> shift))
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    got = _per_doc_max((s[starts] >> (np.uint64(64) - shift)).astype(np.int64),
                       np.diff(starts, append=len(s)), ndoc)  # a collision in the truncated key only raises it
    mine = np.unique(doc)
    cmax[mine] = got[mine] if cap is None else np.minimum(cap[mine], got[mine])
    need = (longest + n - 1) * cmax > limit
    if need.any():
        sub = need[doc]
        out[need] = (_top_ngram_chars(key[sub], doc[sub], chars[sub], n, ndoc) > limit)[need]
    return out, cmax


def _greedy_dup_chars(words: list, n: int) -> int:
    """datatrove find_all_duplicate: a repeat of an n-gram ("".join) adds its characters and skips n.
    (The reference for `_greedy_scan`, which runs the same loop on hashes of the joined n-grams.)"""
    seen, out, i, end = set(), 0, 0, len(words) - n + 1
    while i < end:
        g = "".join(words[i:i + n])
        if g in seen:
            out += len(g)
            i += n
        else:
            seen.add(g)
            i += 1
    return out


_BASE = np.uint64(0x100000001B3)  # odd base of the polynomial byte hash


def _join_hashes(flat: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per token: (polynomial hash of its UTF-8 bytes, base ** byte length), both mod 2**64, so that
    hash(a + b) = hash(a) * base ** len(b) + hash(b): n-gram keys of "".join semantics by rolling."""
    arr = flat.to_arrow().cast(pa.large_string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    off = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
    blen = np.diff(off)
    if len(arr) == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    data = np.frombuffer(arr.buffers()[2], np.uint8)[off[0]:off[-1]].astype(np.uint64)
    with np.errstate(over="ignore"):
        power = np.cumprod(np.concatenate([[np.uint64(1)], np.full(int(blen.max()), _BASE)]))
        left = np.repeat(off[1:] - off[0], blen) - 1 - np.arange(len(data))  # bytes after this one
        return np.add.reduceat(data * power[left], off[:-1] - off[0]), power[blen]


def _greedy_scan(toks: pl.Series, need: dict) -> dict:
    """{n: {d: `_greedy_dup_chars(toks[d], n)`}} for every d in need[n]. The joined n-grams are hashed
    in bulk (`_join_hashes`); the left-to-right loop visits only positions whose n-gram occurred
    before in the document (the rest are first occurrences: seen unless a jump skipped them)."""
    docs = np.unique(np.concatenate([np.asarray(v, np.int64) for v in need.values()]))
    sub = toks.gather(docs)
    ntok = sub.list.len().fill_null(0).to_numpy().astype(np.int64)
    flat = sub.explode().drop_nulls()
    th, pw = _join_hashes(flat)
    start = np.concatenate([[0], np.cumsum(ntok)])
    cs = np.concatenate([[0], np.cumsum(flat.str.len_chars().to_numpy())]).tolist()
    doc = np.repeat(np.arange(len(docs), dtype=np.uint64), ntok)
    out, key, m = {}, th, 1
    for n in sorted(need):
        with np.errstate(over="ignore"):
            if n < m:
                key, m = th, 1
            while m < n:
                key = key[:-1] * pw[m:] + th[m:]
                m += 1
            mixed = key ^ (doc[:len(key)] * MIX)  # n-grams crossing into the next document are never read
        later = later_repeats(mixed)
        cand = np.flatnonzero(later)
        ds = need[n]
        s = start[np.searchsorted(docs, ds)]
        e = np.maximum(s, s + ntok[np.searchsorted(docs, ds)] - n + 1)
        cut = np.searchsorted(cand, np.stack([s, e])).T.tolist()
        ids, later, cand = key.tolist(), later.tolist(), cand.tolist()
        res = out[n] = {}
        for d, end, (a, b) in zip(ds.tolist(), e.tolist(), cut):
            dup, i, dead, extra = 0, 0, set(), set()
            for q in cand[a:b]:
                if q < i:
                    continue
                if ids[q] in extra or ids[q] not in dead:  # seen: a repeat, skip n
                    dup += cs[q + n] - cs[q]
                    dead.update([ids[p] for p in range(q + 1, min(q + n, end)) if not later[p]])
                    i = q + n
                else:
                    extra.add(ids[q])
                    i = q + 1
            res[d] = dup
    return out


def _covered_chars(starts: np.ndarray, n: int, doc: np.ndarray, cs: np.ndarray, ndoc: int) -> np.ndarray:
    """Per document: characters of the tokens inside any of the n-grams starting at `starts` (sorted
    rows, each n-gram inside one document; `cs` the cumulative token characters, from 0)."""
    span = np.minimum(n, np.diff(starts, append=len(cs)))  # the next start takes over the overlap
    return np.bincount(doc[starts].astype(np.int64), weights=cs[starts + span] - cs[starts], minlength=ndoc)


def _dup_ngram_fails(grams: NGrams, toks: pl.Series, lens: np.ndarray, dup_n_grams) -> tuple[dict, int, float]:
    """The duplicate n-gram rules: ({column: fails per document}, documents scanned, scan seconds).

    The greedy scan counts an n-gram seen before and jumps past it, so what it counts are disjoint
    n-grams that each repeat an earlier one: the characters of the tokens covered by the non-first
    occurrences of n-grams bound it from above. Every n0-gram inside a repeated n-gram repeats (n0 the
    smallest n), which gives a cheaper, looser bound for every n at once from one key array; only
    documents over the threshold on both bounds need the exact scan (`_greedy_scan`).
    The bounds compare token n-grams, the scan (as datatrove) their "".join: n-grams whose joins are
    equal with different tokens ("ab" "c" / "a" "bc") count only where the bounds did not already clear
    the document."""
    ndoc, doc = len(lens), grams.doc
    n0 = min(k for k, _ in dup_n_grams)
    r0, key0, _ = grams.grow(n0)
    later = np.zeros(len(doc), dtype=bool)
    later[r0[later_repeats(key0)]] = True
    pos = np.arange(len(doc))
    run = np.minimum.accumulate(np.where(later, len(doc), pos)[::-1])[::-1] - pos  # repeated n0-grams from here on
    cs = np.concatenate([[0], np.cumsum(grams.tlen)])
    need = {}
    for k, thr in dup_n_grams:  # every n0-gram inside a repeated k-gram repeats too
        need[k] = np.flatnonzero(_covered_chars(np.flatnonzero(run > k - n0), k, doc, cs, ndoc) > thr * lens)
    some = np.unique(np.concatenate(list(need.values())))
    if len(some):  # the exact bound (non-first occurrences of each n), on those documents' tokens only
        mine = np.zeros(ndoc, dtype=bool)
        mine[some] = True
        mine = mine[doc]
        sub = NGrams(doc[mine], grams.h[mine], grams.tlen[mine])
        cs = np.concatenate([[0], np.cumsum(sub.tlen)])
        for k, thr in sorted(dup_n_grams):
            r, key, _ = sub.grow(k)
            ub = _covered_chars(r[later_repeats(key)], k, sub.doc, cs, ndoc)
            need[k] = need[k][ub[need[k]] > thr * lens[need[k]]]
    cand = np.unique(np.concatenate(list(need.values())))
    t0 = time.perf_counter()
    dup = _greedy_scan(toks, need) if len(cand) else {k: {} for k in need}
    cols = {}
    for k, thr in dup_n_grams:
        col = cols[f"gopher_repetition:duplicated_{k}_n_grams"] = np.zeros(ndoc, dtype=bool)
        for d, chars in dup[k].items():
            col[d] = chars / lens[d] > thr
    return cols, len(cand), time.perf_counter() - t0


def _repeated_elements(lists: pl.Series) -> dict:
    """Per list (document): elements, repeated elements and their characters (every occurrence after
    an element's first), by 64-bit string hashes over the exploded lists."""
    n = lists.list.len().fill_null(0).to_numpy()
    flat = lists.explode().drop_nulls()  # a split never yields null elements
    doc = np.repeat(np.arange(len(n), dtype=np.uint64), n)
    with np.errstate(over="ignore"):
        rep = later_repeats(flat.hash().to_numpy() ^ (doc * MIX))
    d = doc[rep].astype(np.int64)
    return {"n": n, "rep": np.bincount(d, minlength=len(n)),
            "chars": np.bincount(d, weights=flat.str.len_chars().to_numpy()[rep], minlength=len(n))}


def _paragraphs_and_lines(text: pl.Series) -> tuple[pl.Series, dict, dict]:
    """(characters per document, `_repeated_elements` of its paragraphs, of its lines)."""
    t = pl.col("text")
    parts = pl.DataFrame({"text": text}).select(
        n=t.str.len_chars(),
        paras=t.str.strip_chars().str.replace_all(r"\n{2,}", SEP).str.split(SEP),
        lines=t.str.replace_all(r"\n+", "\n").str.split("\n"))
    return parts["n"], _repeated_elements(parts["paras"]), _repeated_elements(parts["lines"])


def _token_ngrams(toks: pl.Series, ndoc: int) -> tuple[np.ndarray, NGrams]:
    """(document of every token, the tokens' `NGrams`) over the exploded token lists."""
    flat = toks.explode().drop_nulls()  # tokens are never null; an empty list may explode to one
    doc = np.repeat(np.arange(ndoc, dtype=np.uint64), toks.list.len().fill_null(0).to_numpy())
    return doc, NGrams(doc, flat.hash().to_numpy(), flat.str.len_chars().to_numpy().astype(np.int64))


def _gopher_repetition(text: pl.Series, toks: pl.Series, cfg: GopherRepetitionFilter) -> tuple[pl.DataFrame, int, float]:
    chars, p, ln = _paragraphs_and_lines(text)
    st = pl.DataFrame({"n": chars, "p_frac": p["rep"] / np.maximum(p["n"], 1), "p_chars": p["chars"],
                       "l_frac": ln["rep"] / np.maximum(ln["n"], 1), "l_chars": ln["chars"]})
    c, n = pl.col, pl.col("n")
    out = st.select(
        (n == 0).alias("gopher_repetition:empty"),  # datatrove 0.10.1 returns "empty" first
        gt(c("p_frac"), cfg.dup_para_frac).alias("gopher_repetition:dup_para_frac"),
        gt(ratio(c("p_chars"), n), cfg.dup_para_char_frac).alias("gopher_repetition:dup_para_char_frac"),
        gt(c("l_frac"), cfg.dup_line_frac).alias("gopher_repetition:dup_line_frac"),
        gt(ratio(c("l_chars"), n), cfg.dup_line_char_frac).alias("gopher_repetition:dup_line_char_frac"),
    )
    lens = st["n"].to_numpy()
    doc, grams = _token_ngrams(toks, len(st))
    cap, cap_n = None, None  # the counts' bound of the last size, for the larger sizes after it
    for k, thr in cfg.top_n_grams:
        rows, key, chars = grams.grow(k)
        fails, got = _top_ngram_fails(key, doc[rows].astype(np.int64), chars, k, thr * np.maximum(lens, 1),
                                      cap if cap_n is not None and cap_n < k else None)
        cap, cap_n = got, k
        out = out.with_columns(pl.Series(f"gopher_repetition:top_{k}_gram", fails))
    python_docs, python_s = 0, 0.0
    if cfg.dup_n_grams:
        cols, python_docs, python_s = _dup_ngram_fails(grams, toks, lens, cfg.dup_n_grams)
        out = out.with_columns(**cols)
    return out, python_docs, python_s


def _repetition_values(text: pl.Series, toks: pl.Series, cfg: GopherRepetitionFilter) -> pl.DataFrame:
    """The figures `_gopher_repetition`'s rules compare with their thresholds, per document (exact: every
    document's n-grams counted and scanned; for the few documents the UI explains, not the bulk pass)."""
    chars, p, ln = _paragraphs_and_lines(text)
    lens = chars.to_numpy()
    per = np.maximum(lens, 1)
    cols = {"gopher_repetition:empty": [None] * len(lens),
            "gopher_repetition:dup_para_frac": p["rep"] / np.maximum(p["n"], 1),
            "gopher_repetition:dup_para_char_frac": p["chars"] / per,
            "gopher_repetition:dup_line_frac": ln["rep"] / np.maximum(ln["n"], 1),
            "gopher_repetition:dup_line_char_frac": ln["chars"] / per}
    doc, grams = _token_ngrams(toks, len(lens))
    for k, _ in cfg.top_n_grams:
        rows, key, chars = grams.grow(k)
        cols[f"gopher_repetition:top_{k}_gram"] = _top_ngram_chars(key, doc[rows].astype(np.int64), chars, k,
                                                                    len(lens)) / per
    words = toks.to_list()
    for k, _ in cfg.dup_n_grams:
        cols[f"gopher_repetition:duplicated_{k}_n_grams"] = np.array(
            [_greedy_dup_chars(w or [], k) for w in words], np.float64) / per
    return pl.DataFrame({r: pl.Series(v, dtype=pl.Float64) for r, v in cols.items()})


def rule(batch: Batch, cfg: GopherRepetitionFilter) -> pl.DataFrame:
    out, python_docs, batch.seconds["gopher_repetition:python_scan"] = _gopher_repetition(batch.text, batch.tokens(), cfg)
    batch.python_docs += python_docs
    return out


def values(batch: Batch, cfg: GopherRepetitionFilter) -> pl.DataFrame:
    return _repetition_values(batch.text, batch.tokens(), cfg)


def thresholds(cfg: GopherRepetitionFilter) -> dict:
    return {"gopher_repetition:empty": ("", None),
            "gopher_repetition:dup_para_frac": (">", cfg.dup_para_frac),
            "gopher_repetition:dup_para_char_frac": (">", cfg.dup_para_char_frac),
            "gopher_repetition:dup_line_frac": (">", cfg.dup_line_frac),
            "gopher_repetition:dup_line_char_frac": (">", cfg.dup_line_char_frac),
            **{f"gopher_repetition:top_{k}_gram": (">", t) for k, t in cfg.top_n_grams},
            **{f"gopher_repetition:duplicated_{k}_n_grams": (">", t) for k, t in cfg.dup_n_grams}}


FILTER = Filter("gopher_repetition", GopherRepetitionFilter, rule, values, thresholds)
