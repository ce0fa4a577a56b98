"""stages/filters/cascade.py Gopher repetition rules: the bulk path (sorts over a batch, bounds, the scan on
hashed n-grams) decides exactly as a per-document reference written the way datatrove 0.10.1 computes
them (`find_duplicates` over paragraphs and lines, `find_top_duplicate` over " ".join n-grams,
`find_all_duplicate` over "".join n-grams), on varied batches: small vocabularies (many repeats and
ties), repeated phrases, lines and paragraphs, documents shorter than n, empty ones, several thresholds. The bounds that clear documents before the scan use token n-grams, not
joined strings, so n-grams whose joins collide ("ab" "c" / "a" "bc") are left to the scan's own test."""

from __future__ import annotations

import random
import re
from collections import Counter

import numpy as np
import pytest

from mix_assets.stages.filters import cascade, kernels
from mix_assets.stages.filters.cascade import FilterConfig, apply_filters
from mix_assets.stages.filters.kernels import key_groups, tokens
from mix_assets.stages.filters.rules.gopher_repetition import (
    GopherRepetitionFilter,
    _greedy_dup_chars,
    _greedy_scan,
    _top_ngram_chars,
)

TOP = (2, 3, 4)
DUP = (5, 6, 7, 8, 9, 10)


def ref_top_chars(words: list, n: int) -> int:
    grams = [" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0
    g, c = Counter(grams).most_common(1)[0]  # the first seen among the most frequent
    return len(g) * c


def varied_docs(seed: int, count: int = 120, collide: bool = False) -> list[str]:
    rng = random.Random(seed)
    docs = ["", "one", "a b c d", "ab c ab c ab c"] + (["ab c d e f a bc d e f ab c d e f"] if collide else [])
    for _ in range(count):
        vocab = [rng.choice(["a", "the", "of", "river", "mill", "x", "—", ","] + (["ab", "bc", "c"] if collide else []))
                 for _ in range(rng.randint(2, 8))] + [f"w{rng.randint(0, 400)}" for _ in range(rng.randint(1, 60))]
        words = [rng.choice(vocab) for _ in range(rng.randint(0, 400))]
        if rng.random() < 0.5 and len(words) > 20:  # plant repeated phrases
            phrase = words[:rng.randint(3, 12)]
            for _ in range(rng.randint(1, 8)):
                at = rng.randint(0, len(words))
                words[at:at] = phrase
        sep = rng.choice([" ", " ", "\n", ". ", "\n\n", " \n"])
        docs.append(sep.join(words))
    return docs


def ref_dups(elements: list) -> tuple[int, int]:
    """datatrove find_duplicates: (repeated elements, their characters)."""
    seen, n, chars = set(), 0, 0
    for e in elements:
        if e in seen:
            n, chars = n + 1, chars + len(e)
        seen.add(e)
    return n, chars


def ref_fails(docs: list[str], cfg: GopherRepetitionFilter) -> dict:
    toks = tokens(cascade._as_series(docs)).to_list()
    out = {}
    for what, split, frac, char_frac in (
            ("para", lambda t: re.split(r"\n{2,}", t.strip()), cfg.dup_para_frac, cfg.dup_para_char_frac),
            ("line", lambda t: re.split(r"\n+", t), cfg.dup_line_frac, cfg.dup_line_char_frac)):
        parts = [split(t) for t in docs]
        out[f"gopher_repetition:dup_{what}_frac"] = [bool(ref_dups(p)[0] / len(p) > frac) for p in parts]
        out[f"gopher_repetition:dup_{what}_char_frac"] = [
            bool(len(t) and ref_dups(p)[1] / len(t) > char_frac) for t, p in zip(docs, parts)]
    for n, thr in cfg.top_n_grams:
        out[f"gopher_repetition:top_{n}_gram"] = [
            bool(len(t) and ref_top_chars(w, n) / len(t) > thr) for t, w in zip(docs, toks)]
    for n, thr in cfg.dup_n_grams:
        out[f"gopher_repetition:duplicated_{n}_n_grams"] = [
            bool(len(t) and _greedy_dup_chars(w, n) / len(t) > thr) for t, w in zip(docs, toks)]
    return out


@pytest.mark.parametrize("seed,scale", [(1, 1.0), (2, 0.5), (3, 0.25), (4, 2.0)])
def test_bulk_repetition_rules_equal_the_per_document_reference(seed, scale):
    docs = varied_docs(seed)
    d = GopherRepetitionFilter()
    cfg = GopherRepetitionFilter(
        dup_para_frac=d.dup_para_frac * scale, dup_para_char_frac=d.dup_para_char_frac * scale,
        dup_line_frac=d.dup_line_frac * scale, dup_line_char_frac=d.dup_line_char_frac * scale,
        top_n_grams=tuple((n, thr * scale) for n, thr in d.top_n_grams),
        dup_n_grams=tuple((n, thr * scale) for n, thr in d.dup_n_grams))
    r = apply_filters(docs, FilterConfig.only("gopher_repetition").replace(gopher_repetition=cfg))
    got, want = r.failed, ref_fails(docs, cfg)
    assert 0 < r.python_docs < len(docs)  # the bounds clear some documents, the scan decides others
    for rule, w in want.items():
        assert got[rule].tolist() == w, rule
    fired = sum(sum(w) for w in want.values())
    assert 0 < fired < len(want) * len(docs)  # both outcomes occur


def test_greedy_scan_equals_the_string_scan():
    docs = varied_docs(5, 60, collide=True) + ["ab c d e f a bc d e f " * 3, "a " * 40]
    toks = tokens(cascade._as_series(docs))
    words = toks.to_list()
    need = {n: np.arange(len(docs)) for n in DUP}
    got = _greedy_scan(toks, need)
    for n in DUP:
        assert [got[n][d] for d in range(len(docs))] == [_greedy_dup_chars(w, n) for w in words], n


def test_top_ngram_chars_ties_take_the_first_seen():
    words = [["c", "aaa", "bb", "aaa", "bb", "c"], ["x", "y"], ["z"]]  # doc 0: each twice, "c" first
    key = np.array([hash(w) & (2**63 - 1) for ws in words for w in ws], dtype=np.uint64)
    doc = np.repeat(np.arange(3), [len(w) for w in words])
    chars = np.array([len(w) for ws in words for w in ws])
    assert _top_ngram_chars(key, doc, chars, 1, 3).tolist() == [ref_top_chars(w, 1) for w in words] == [2, 1, 1]


def test_groups_orders_colliding_high_bits_by_key(monkeypatch):
    rng = np.random.default_rng(0)
    key = rng.integers(0, 50, 2_000).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    want_rows = np.argsort(key, kind="stable")
    for fmix in (kernels.fmix, lambda x: x & np.uint64(0xFF)):  # the second: every key in one high-bit run
        monkeypatch.setattr(kernels, "fmix", fmix)
        rows, starts = key_groups(key)
        got = sorted(r.tolist() for r in np.split(rows, starts[1:]))
        assert got == sorted(r.tolist() for r in np.split(want_rows, np.flatnonzero(np.diff(key[want_rows])) + 1))
