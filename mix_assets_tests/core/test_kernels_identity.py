"""The faster text kernels return exactly what the code as first written returned
(mix_assets_tests/oracles/kernels_reference.py): same words, hashes, n-grams, signatures, shingle
sets and prefilter candidates, on ASCII, on every Unicode code point, and on seeded random texts."""

from __future__ import annotations

import random
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.dedup import minhash as mh
from mix_assets.core import textkeys as tk
from mix_assets_tests.oracles import kernels_reference as ref

# Characters chosen to stress each step: NFKC changes (fullwidth, ligatures, NBSP, superscripts,
# Kelvin), lower-casing that grows (İ -> i + combining dot), combining marks, categories the
# punctuation rule deletes (\v, \x1c-\x1f, NEL, zero-width, BOM, emoji, symbols), Unicode
# whitespace (U+1680, U+2028, U+3000) and plain ASCII.
SPECIAL = (
    "\t\n\v\f\r \x00\x1c\x1d\x1e\x1f\x7f\x85\xa0\xad"
    "\u0301\u0308\u0327\u200b\u200c\u200d\u2060\ufeff\u180e"
    "\u1680\u2000\u2007\u2028\u2029\u202f\u205f\u3000"
    "ＡＢＣａｂｃ１２３！？ﬁﬂ²³½ⅫK℃İıßẞΣσςéÉñçøæ"
    "数学问题日本語한국어עבריתالعربية\u1100\u1161\u11a8각\u0915\u093c\u0958"
    "😀👍🏽🇫🇷♥★→—–…«»“”‘’•·§¶©®™°€£¥"
)
ASCII = "".join(chr(c) for c in range(128))


def same_words(texts) -> None:
    got, want = tk.words(texts), ref.words(texts)
    got.validate(full=True)
    assert got.type == want.type
    assert got.equals(want)
    assert got.null_count == want.null_count


def random_texts(seed: int, n: int, alphabet: str, max_len: int = 60) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.choice([0, 1, 2, 5, 20, max_len])
        out.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, k))))
    return out


def test_every_ascii_character_and_pair():
    singles = [c for c in ASCII] + [f"a{c}b" for c in ASCII] + [f"{c}Q" for c in ASCII] + [f"Q{c}" for c in ASCII]
    pairs = [f"x{c}{d}Y" for c in ASCII for d in ASCII]
    same_words(singles)
    same_words(pairs)
    same_words(["".join(ASCII) * 3, ASCII[::-1]])


def test_nfkc_yes_code_points_leave_text_unchanged():
    # the composing set is this Python's Unicode data; every "yes" code point, in a text of ASCII and
    # other "yes" code points (composable starters included), is left alone by Arrow's NFKC
    second = set()
    for c in range(0x110000):
        d = unicodedata.decomposition(chr(c))
        if d and not d.startswith("<") and len(d.split()) == 2:
            second.add(int(d.split()[1], 16))
    assert second == tk._COMPOSES_SECOND
    cps = np.array([c for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF])
    yes = cps[tk._nfkc_yes(cps)]
    assert 0xE9 in yes and 0xFFFD in yes and 0xA0 not in yes and 0x301 not in yes and 0x1161 not in yes
    texts = pa.array([f"a{c}b{c}{c} e{c} é{c} \u1100{c} 각{c}" for c in map(chr, yes.tolist())], pa.large_string())
    assert tk._may_change_under_nfkc(texts).sum() == 0
    assert pc.utf8_normalize(texts, form="NFKC").equals(texts)
    no = cps[~tk._nfkc_yes(cps)]
    assert tk._may_change_under_nfkc(pa.array([f"a{chr(c)}" for c in no.tolist()], pa.large_string())).all()


def test_every_canonical_pair_composes_as_before():
    # each canonical two-character decomposition written out (NFKC composes most of them back),
    # Hangul syllables as jamo, and each second character after plain letters
    pairs = []
    for c in range(0x110000):
        d = unicodedata.decomposition(chr(c))
        if d and not d.startswith("<") and len(d.split()) == 2:
            pairs.append("".join(chr(int(x, 16)) for x in d.split()))
    pairs += ["\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\u1112\u1175\u11c2"]
    same_words(pairs)
    same_words([f"x{p}y {p[1:]}z" for p in pairs])


def test_every_code_point():
    # each code point alone, between ASCII letters and after a non-ASCII letter (surrogates
    # cannot be UTF-8)
    cps = [c for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(cps), 1 << 18):
        chunk = [chr(c) for c in cps[start : start + (1 << 18)]]
        same_words(chunk)
        same_words([f"a{c}b" for c in chunk])
        same_words([f"é{c}x y" for c in chunk])


@pytest.mark.parametrize("seed", range(6))
def test_random_texts(seed):
    ascii_words = "The quick brown fox don't well-known 42 x-ray (a) [b] {c}... !!! ?? -- e.g. U.S.A.".split()
    alphabet = ASCII + SPECIAL + "abcdefghij " * 8
    texts = random_texts(seed, 400, alphabet) + [
        " ".join(random.Random(seed).choice(ascii_words) for _ in range(k)) for k in range(0, 200, 7)
    ] + ["", " ", "\n\t ", "\v", "\x1c\x1d", "\u3000", "\u200b", "😀", "İ", "ﬁ"]
    random.Random(seed).shuffle(texts)
    same_words(texts)
    same_words(pa.array(texts, pa.string()))  # a narrow string type
    same_words(pa.chunked_array([texts[:100], texts[100:]], pa.large_string()))
    same_words(pa.array(texts, pa.large_string()).slice(37, 211))  # an offset into the buffers
    assert tk.normalise(texts).equals(ref.normalise(texts))


def test_all_ascii_rows_take_the_byte_path_alone():
    rng = random.Random(5)
    texts = random_texts(5, 500, ASCII + "abcdefgh  " * 10, 200)
    same_words(texts)
    same_words([t for t in texts if t.strip()][:50])


def test_long_runs_of_deleted_characters_and_document_edges():
    run = "-" * 3 + "." * 13  # longer than the old splitter walked back (its _WALK, 8)
    texts = [f"x{run}y", f"{run}y", f"x{run}", "ab.", "..cd", f"a {run}b", "é" + run + "x", run,
             "x.", ".y", "q", "don't", "'tis", "(((((((((((((a)))))))", "a" + "\u200b" * 20 + "b",
             "\u200b" * 20 + "c", "d" + "😀" * 12, "😀" * 12 + "e"]
    same_words(texts)
    same_words(texts[::-1])
    same_words([t for t in texts for _ in range(3)])


def test_empty_inputs():
    for texts in ([], [""], ["", ""], [" "], pa.array([], pa.large_string())):
        same_words(texts)


@pytest.mark.parametrize("seed", range(3))
def test_hashes_ngrams_signatures_and_sets(seed):
    texts = random_texts(seed, 300, ASCII + SPECIAL + "abcdefghij " * 20, 400)
    wl = tk.words(texts)
    h, off = tk.word_hashes(wl)
    rh, roff = ref.word_hashes(wl)
    assert h.dtype == rh.dtype and np.array_equal(h, rh) and np.array_equal(off, roff)
    assert np.array_equal(tk.word_hashes(wl.slice(11, 100))[0], ref.word_hashes(wl.slice(11, 100))[0])
    for n in (1, 2, 3, 5, 8, 13, 40):
        for short in ("whole", "drop"):
            g, goff = tk.ngram_hashes(h, off, n, short)
            rg, rgoff = ref.ngram_hashes(h, off, n, short)
            assert g.dtype == rg.dtype and np.array_equal(g, rg) and np.array_equal(goff, rgoff), (n, short)
    g, goff = tk.ngram_hashes(h, off, 5)
    a, b = mh.permutations(128, seed + 1)
    want = ref.signatures_from_hashes(mh.shingle_hash32(g), goff, a, b)
    got = mh.signatures_from_hashes(mh.shingle_hash32(g), goff, a, b)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    for n in (3, 5):
        s, soff = mh.shingle_sets(texts, n)
        rs, rsoff = ref.shingle_sets(texts, n)
        assert np.array_equal(s, rs) and np.array_equal(soff, rsoff)


def test_empty_hash_inputs():
    wl = tk.words(["", "  "])
    assert all(np.array_equal(x, y) for x, y in zip(tk.word_hashes(wl), ref.word_hashes(wl)))
    h, off = tk.word_hashes(wl)
    for short in ("whole", "drop"):
        got, want = tk.ngram_hashes(h, off, 5, short), ref.ngram_hashes(h, off, 5, short)
        assert all(np.array_equal(x, y) for x, y in zip(got, want))
    a, b = mh.permutations(16)
    empty = np.zeros(0, np.uint32)
    assert np.array_equal(mh.signatures_from_hashes(empty, np.zeros(3, np.int64), a, b),
                          ref.signatures_from_hashes(empty, np.zeros(3, np.int64), a, b))


def test_bitmap_candidates():
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64))
    v = np.concatenate([rng.integers(0, 2**64 - 1, 20000, dtype=np.uint64), keys[::3]])
    for k in (keys, keys[:1], np.zeros(0, np.uint64)):
        assert np.array_equal(ct._Bitmap(k).candidates(v), ref._Bitmap(k).candidates(v))
    assert np.array_equal(ct._Bitmap(keys).candidates(v[:0]), ref._Bitmap(keys).candidates(v[:0]))


def test_shingle_order_with_equal_packed_keys():
    # hashes equal in their top bits but not below them (the packed key ties): the lexsort fallback
    rng = np.random.default_rng(1)
    doc = np.repeat(np.arange(5, dtype=np.int64), [3, 0, 4, 1, 6])
    for g in (rng.integers(0, 2**63, len(doc), dtype=np.uint64),
              np.array([7, 3, 7, 5, 4, 5, 1, 9, 2, 6, 2, 0, 8, 8], np.uint64),
              np.uint64(1 << 40) + np.arange(len(doc), dtype=np.uint64)[::-1]):
        order = np.lexsort((g, doc))
        got = mh._by_doc_then_hash(g, doc)
        assert np.array_equal(got[0], g[order]) and np.array_equal(got[1], doc[order])


def test_fuzzy_candidates():
    from mix_assets.stages.audit import fuzzy
    from mix_assets_tests.support import fuzzy_plants as fp

    items = {task: its[:150] for task, its in fp.eval_items().items()}
    index = fuzzy.build_index(items, fuzzy.Params())
    docs, _, _ = fp.plant(items, fp.prose(0.3, seed=3), per_task=40, edits=1, seed=11)
    # items cut across a document boundary (a window must stop at its document's end), and repeated
    halves = [w for its in items.values() for it in its[:30] for w in _halves(it)]
    texts = docs + halves + [d for d in docs[:40] for _ in range(2)] + random_texts(2, 50, ASCII + SPECIAL)
    for start in range(0, len(texts), 97):
        h, off = tk.word_hashes(tk.words(texts[start : start + 97]))
        sh, soff = tk.ngram_hashes(h, off, index.params.shingle, short="whole")
        got, want = fuzzy.candidates(index, sh, soff), ref.candidates(index, sh, soff)
        assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want))
        assert len(got[0]) or start  # the planted items are found
    empty = np.zeros(0, np.uint64), np.zeros(1, np.int64)
    assert all(np.array_equal(g, w) for g, w in zip(fuzzy.candidates(index, *empty), ref.candidates(index, *empty)))


def test_fuzzy_candidates_on_edge_documents():
    # empty, one-word and shorter-than-a-shingle documents, non-ASCII, one huge document holding every
    # item (thousands of heavy (item, document) pairs, buckets crowded), items repeated in one document,
    # and batches of one document
    from mix_assets.stages.audit import fuzzy
    from mix_assets_tests.support import fuzzy_plants as fp

    items = {task: its[:120] for task, its in fp.eval_items().items()}
    index = fuzzy.build_index(items, fuzzy.Params())
    every = [it for its in items.values() for it in its]
    huge = " ".join(every * 2)
    texts = ["", "one", "one two", "   ", " ".join(every[:3]), "数学 " + every[5] + " 😀 " + every[5], huge,
             every[7] + " " + every[7] + " " + every[7]] + random_texts(5, 40, ASCII + SPECIAL)
    seen = 0
    for size in (1, 3, len(texts)):
        for start in range(0, len(texts), size):
            h, off = tk.word_hashes(tk.words(texts[start : start + size]))
            sh, soff = tk.ngram_hashes(h, off, index.params.shingle, short="whole")
            got, want = fuzzy.candidates(index, sh, soff), ref.candidates(index, sh, soff)
            assert all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want)), (size, start)
            seen += len(want[0])
    assert seen > 3 * len(every)  # the huge document alone holds every item


def test_bitmap_lookup_in_key_order():
    rng = np.random.default_rng(4)
    keys = np.unique(rng.integers(0, 2**64 - 1, 3000, dtype=np.uint64))
    v = np.concatenate([rng.integers(0, 2**64 - 1, 9000, dtype=np.uint64), keys[::2], keys[::3], keys[:5]])
    rng.shuffle(v)
    bm = ct._Bitmap(keys)
    pos, idx = bm.lookup(keys, v)
    kpos, kidx = bm.lookup(keys, v, by_key=True)
    assert np.all(np.diff(kidx) >= 0) and np.array_equal(keys[kidx], v[kpos])
    assert sorted(zip(pos.tolist(), idx.tolist())) == sorted(zip(kpos.tolist(), kidx.tolist()))
    assert np.all(np.diff(pos) > 0) and np.array_equal(keys[idx], v[pos])
    assert all(x.size == 0 for x in bm.lookup(keys, v[:0], by_key=True))


def test_fuzzy_best_jaccards():
    from mix_assets.stages.audit import fuzzy
    from mix_assets_tests.support import fuzzy_plants as fp

    items = {task: its[:150] for task, its in fp.eval_items().items()}
    index = fuzzy.build_index(items, fuzzy.Params())
    docs, _, _ = fp.plant(items, fp.prose(0.3, seed=3), per_task=40, edits=2, seed=12)
    halves = [w for its in items.values() for it in its[:30] for w in _halves(it)]
    texts = docs + halves + ["", "one"] + [d for d in docs[:40] for _ in range(2)] + random_texts(2, 50, ASCII)
    seen = 0
    for start in range(0, len(texts), 97):
        h, off = tk.word_hashes(tk.words(texts[start : start + 97]))
        sh, soff = tk.ngram_hashes(h, off, index.params.shingle, short="whole")
        pos, item = fuzzy.candidates(index, sh, soff)
        # also every posting position of the planted items: windows cut at both ends of a document
        extra = np.flatnonzero(np.isin(sh, index.rep_keys))[:400]
        pos = np.concatenate([pos, extra, np.maximum(extra - 5, 0)])
        item = np.concatenate([item, np.arange(len(extra) * 2) % index.items])
        got = fuzzy.best_jaccards(index, sh, soff, pos, item)
        want = np.array([ref.best_jaccard(index, sh, soff, int(p), int(i)) for p, i in zip(pos, item)])
        assert got.dtype == want.dtype and np.array_equal(got, want)
        seen += int((want >= index.params.threshold).sum())
    assert seen > 50  # the planted items are found
    assert fuzzy.best_jaccards(index, *(np.zeros(0, np.uint64), np.zeros(1, np.int64)), *[np.zeros(0, np.int64)] * 2).size == 0


def test_registry_scan():
    from mix_assets_tests.support import fuzzy_plants as fp

    items = fp.eval_items()
    reg = ct.Registry.build({t: ct.task_ngrams(its[:200]) for t, its in items.items()}, n=13, short_min=8)
    docs, _, _ = fp.plant({t: its[:200] for t, its in items.items()}, fp.prose(0.3, seed=4), per_task=40, edits=0, seed=5)
    halves = [w for its in items.values() for it in its[:30] for w in _halves(it)]
    texts = docs + halves + ["", "a b"] + random_texts(3, 50, ASCII + SPECIAL)
    hit = 0
    for start in range(0, len(texts), 89):
        h, off = tk.word_hashes(tk.words(texts[start : start + 89]))
        got, want = reg.scan_word_hashes(h, off), ref.registry_scan(reg, h, off)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        hit += int(want.sum())
    assert hit
    h, off = tk.word_hashes(tk.words([""]))
    assert np.array_equal(reg.scan_word_hashes(h, off), ref.registry_scan(reg, h, off))


def _halves(item: str) -> list[str]:
    words = item.split()
    return ["lorem ipsum " + " ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :]) + " dolor"]


def test_fuzzy_sort_with_values():
    from mix_assets.stages.audit import fuzzy

    rng = np.random.default_rng(3)
    for kmax, vmax in ((1000, 33), (2**40, 2**20), (2**62, 5), (2**30, 2**40)):  # packed, and too wide to pack
        key = np.unique(rng.integers(0, kmax, 3000))
        rng.shuffle(key)
        val = rng.integers(0, vmax, len(key))
        order = np.argsort(key)
        got = fuzzy._sorted_with(key, val)
        assert np.array_equal(got[0], key[order]) and np.array_equal(got[1], val[order])


def test_word_hash_of_every_length():
    # XXH64's short-input path by length (lanes of 8, 4 and 1 bytes), the long path from 32 bytes up
    rng = random.Random(9)
    alphabet = "abcxyz0189" + "éßΣ数😀"
    words = [""] + ["".join(rng.choice(alphabet) for _ in range(k)) for k in range(1, 70) for _ in range(12)]
    wl = pa.array([words[:500], [], None, words[500:]], pa.list_(pa.large_string()))
    got, off = tk.word_hashes(wl)
    assert got.dtype == np.uint64 and got.tolist() == [tk.word_hash(w) for w in words]
    assert off.tolist() == [0, 500, 500, 500, len(words)]
    got, off = tk.word_hashes(wl.slice(3))
    assert got.tolist() == [tk.word_hash(w) for w in words[500:]] and off.tolist() == [0, len(words) - 500]
    assert got.tolist() == ref.word_hashes_dictionary(wl.slice(3))[0].tolist()


def test_exact_keys():
    texts = random_texts(4, 200, ASCII + SPECIAL, 300) + [""]
    norm = tk.normalise(texts)
    assert tk.exact_keys(norm) == ref.exact_keys(norm)
    assert tk.exact_keys(norm.slice(3, 50)) == ref.exact_keys(norm.slice(3, 50))
    assert tk.exact_keys(norm.cast(pa.string())) == ref.exact_keys(norm.cast(pa.string()))
    assert tk.exact_keys(pa.chunked_array([norm[:9], norm[9:]])) == ref.exact_keys(norm)
    # signing keys a text with words on its normalised text; one without words on its raw pieces
    # (WordKeys.dedup_keys, issue 25: distinct emoji-only texts are not one exact duplicate)
    signed, want = mh.sign_texts(texts, threads=1).exact_keys, ref.exact_keys(norm)
    has_words = [len(x) > 0 for x in norm.to_pylist()]
    assert not all(has_words) and any(has_words)
    assert [k for k, w in zip(signed, has_words) if w] == [k for k, w in zip(want, has_words) if w]
    assert signed == tk.word_keys(texts).dedup_keys()


@pytest.mark.parametrize("raw", [b"\xff\xfe abc", b"ab\x80cd", b"\xc3", b"x\xf8\x88\x80\x80\x80", b"\xed\xa0\x80"])
def test_invalid_utf8_fails_as_before(raw):
    data = pa.py_buffer(raw)
    bad = pa.Array.from_buffers(pa.large_string(), 2, [None, pa.py_buffer(np.array([0, 1, len(raw)], np.int64)), data])
    with pytest.raises(pa.ArrowInvalid) as want:
        ref.words(bad)
    with pytest.raises(pa.ArrowInvalid) as got:
        tk.words(bad)
    assert str(got.value) == str(want.value)
