"""The compiled kernels (core/kernels_jit.py, through the functions that call them) return exactly what
the numpy kernels they replaced returned (mix_assets_tests/oracles/kernels_reference.py), on adversarial
inputs: empty documents, documents shorter than the shingle, one huge document, the old code's block
boundaries, all-equal hashes, extreme uint32 / uint64 values."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import xxhash

from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.audit import fuzzy
from mix_assets.core import kernels_jit
from mix_assets.stages.dedup import minhash as mh
from mix_assets.core import textkeys as tk
from mix_assets_tests.oracles import kernels_reference as ref

U32 = np.uint32(0xFFFFFFFF)


def _offsets(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _signing_cases():
    rng = np.random.default_rng(7)
    yield "no documents", np.zeros(0, np.uint32), np.zeros(1, np.int64)
    yield "all empty", np.zeros(0, np.uint32), np.zeros(5, np.int64)
    lens = [0, 1, 0, 3, 0, 0, 2, 1]
    yield "empty between short", rng.integers(0, 1 << 32, sum(lens), dtype=np.uint32), _offsets(lens)
    yield "all equal", np.full(50, 12345, np.uint32), _offsets([10, 0, 40])
    yield "max values", np.full(9, U32, np.uint32), _offsets([4, 5])
    yield "zeros", np.zeros(9, np.uint32), _offsets([1, 8])
    edge = np.array([0, 1, U32, U32 - 1, 1 << 31, (1 << 31) - 1], np.uint32)
    yield "edge values", np.tile(edge, 7), _offsets([6, 36])
    n = ref.BLOCK + 13
    yield "one huge document", rng.integers(0, 1 << 32, n, dtype=np.uint32), _offsets([n])
    lens = [ref.BLOCK - 1, 2, ref.CHUNK, 1, ref.BLOCK + 5, 0, 3]  # documents across the old blocks
    yield "block boundaries", rng.integers(0, 1 << 32, sum(lens), dtype=np.uint32), _offsets(lens)


@pytest.mark.parametrize("num_perm,seed", [(128, 1), (1, 3), (7, 2), (256, 1)])
def test_signatures_equal_the_numpy_kernels(num_perm, seed):
    a, b = mh.permutations(num_perm, seed)
    for name, h32, off in _signing_cases():
        got = mh.signatures_from_hashes(h32, off, a, b)
        want = ref.signatures_from_hashes_blocked(h32, off, a, b)
        assert got.dtype == np.uint32 and got.shape == want.shape, name
        assert np.array_equal(got, want), name
        if num_perm == 128 and len(h32) < 100:
            assert np.array_equal(got, ref.signatures_from_hashes(h32, off, a, b)), name


def test_signatures_with_extreme_permutations():
    a = np.array([1, U32, 0x80000001, 3], np.uint32)
    b = np.array([0, U32, 1, 0x7FFFFFFF], np.uint32)
    for name, h32, off in _signing_cases():
        assert np.array_equal(mh.signatures_from_hashes(h32, off, a, b),
                              ref.signatures_from_hashes_blocked(h32, off, a, b)), name


def test_xxh64_of_every_length_and_byte():
    rng = np.random.default_rng(3)
    strings = [rng.integers(0, 256, k, dtype=np.uint8).tobytes() for k in range(0, 100) for _ in range(3)]
    strings += [b"\xff" * k for k in (0, 1, 4, 8, 31, 32, 33, 64)] + [b"\x00" * 40, bytes(range(256)) * 9]
    off = np.concatenate([[0], np.cumsum([len(s) for s in strings])]).astype(np.int64)
    got = kernels_jit.xxh64_strings(off, np.frombuffer(b"".join(strings), np.uint8))
    assert got.dtype == np.uint64 and got.tolist() == [xxhash.xxh64_intdigest(s) for s in strings]
    assert kernels_jit.xxh64_strings(np.zeros(1, np.int64), np.zeros(0, np.uint8)).size == 0


def test_word_hashes_equal_the_dictionary_version():
    words = ["a", "the", "x" * 31, "y" * 32, "z" * 200, "数学", "😀", "the", "a"]
    wl = pa.array([words, None, [], words[::-1] * 50, ["only"]], pa.list_(pa.large_string()))
    for part in (wl, wl.slice(1), wl.slice(3, 1), wl.slice(1, 2), pa.chunked_array([wl.slice(0, 2), wl.slice(2)])):
        got, off = tk.word_hashes(part)
        want, woff = ref.word_hashes_dictionary(part)
        assert got.dtype == want.dtype and np.array_equal(got, want) and np.array_equal(off, woff)


def _registry():
    rng = np.random.default_rng(5)
    items = {"a": [" ".join(f"w{rng.integers(0, 30)}" for _ in range(k)) for k in (8, 9, 13, 14, 20, 40) * 5],
             "b": ["x " * 13, "x " * 8, "y z " * 10]}
    return ct.Registry.build({t: ct.task_ngrams(its) for t, its in items.items()}, n=13, short_min=8), items


def test_registry_scan_equals_the_numpy_kernels():
    reg, items = _registry()
    texts = ([" ".join(items["a"][:40]), "", "w1", "x " * 5, "x " * 13, "x " * 500, "y z " * 30]
             + [it for its in items.values() for it in its] + ["  "] * 3)
    big = " ".join(texts * 20)  # one huge document holding every item
    for batch in (texts, [big], texts[3:9], ["", ""], ["x"]):
        h, off = tk.word_hashes(tk.words(batch))
        want = ref.registry_scan_prefix(reg, h, off)
        assert np.array_equal(reg.scan_word_hashes(h, off), want)
        assert np.array_equal(want, ref.registry_scan(reg, h, off))
    # all-equal and extreme word hashes (the windows' arithmetic wraps)
    for value in (0, 1, (1 << 64) - 1, 1 << 63):
        h = np.full(300, value, np.uint64)
        off = np.array([0, 5, 5, 13, 12 + 13 + 8, 300], np.int64)
        assert np.array_equal(reg.scan_word_hashes(h, off), ref.registry_scan_prefix(reg, h, off))


def test_bitmap_candidates_and_heavy_postings_equal_the_numpy_kernels():
    rng = np.random.default_rng(11)
    keys = np.unique(rng.integers(0, 1 << 63, 5000, dtype=np.uint64) * np.uint64(2))
    bm = ct._Bitmap(keys)
    v = np.concatenate([keys[::3], rng.integers(0, 1 << 63, 20000, dtype=np.uint64) * np.uint64(2),
                        np.array([0, 1, (1 << 64) - 1, 1 << 63], np.uint64)])
    assert np.array_equal(bm.candidates(v), ref.bitmap_candidates_numpy(bm, v))
    assert np.array_equal(bm.candidates(v[::2]), ref.bitmap_candidates_numpy(bm, v[::2]))  # strided
    assert bm.candidates(np.zeros(0, np.uint64)).size == 0
    for by_key in (False, True):
        assert all(np.array_equal(g, w) for g, w in zip(bm.lookup(keys, v, by_key), ref.bitmap_lookup_numpy(bm, keys, v, by_key)))
    # up to 2**18 postings (3 per hit on average): the stop-22 bucket count is the kernel's (capped above it)
    for n, need in ((0, 16.0), (1, 1.0), (5000, 16.0), (60000, 16.0), (60000, 1.0), (300000, 16.0)):
        # postings of 0 .. 6 items per rep key; hits in key order, some keys hit twice, documents extreme
        post_off = _offsets(rng.integers(0, 7, 40000))
        index = SimpleNamespace(post_off=post_off, post_weight=rng.integers(0, 32, post_off[-1]).astype(np.int32),
                                post_hash=rng.integers(0, 1 << 64, post_off[-1], dtype=np.uint64, endpoint=False))
        r = np.sort(rng.integers(0, 40000, n))
        pos = rng.integers(0, 1 << 20, n)  # shingle positions (the last document's end excluded)
        soff = np.array([0, 5, 5, 1 << 19, 1 << 20], np.int64)  # an empty document, a huge one
        doc = np.searchsorted(soff, pos, side="right") - 1  # each hit's document (kernels.key_hits gives it)
        got = fuzzy._heavy_postings(index, pos, r, doc, need)
        want = ref.heavy_postings_expanded(index, pos, r, soff, need)
        if n > 60000:  # capped: its buckets are unions of the finer ones, so it keeps every posting they keep
            assert set(zip(*want)) <= set(zip(*got)), (n, need)
            continue
        assert all(g.dtype == w.dtype == np.int64 and np.array_equal(g, w) for g, w in zip(got, want)), (n, need)


def test_ngram_hashes_equal_the_numpy_kernels():
    rng = np.random.default_rng(13)
    lens = [0, 1, 4, 5, 6, 0, 12, 13, 14, 2, 40, 0]
    cases = [(rng.integers(0, 1 << 64, sum(lens), dtype=np.uint64), _offsets(lens)),
             (np.full(sum(lens), (1 << 64) - 1, np.uint64), _offsets(lens)),
             (np.zeros(sum(lens), np.uint64), _offsets(lens)),
             (rng.integers(0, 1 << 64, 100000, dtype=np.uint64), _offsets([100000])),
             (np.zeros(0, np.uint64), _offsets([0, 0])), (np.zeros(0, np.uint64), np.zeros(1, np.int64))]
    for h, off in cases:
        for n in (1, 2, 3, 5, 13, 50):
            for short in ("whole", "drop"):
                got, goff = tk.ngram_hashes(h, off, n, short)
                want, woff = ref.ngram_hashes_doubling(h, off, n, short)
                assert got.dtype == want.dtype and np.array_equal(got, want) and np.array_equal(goff, woff), (n, short)


def test_split_equals_the_numpy_kernel():
    texts = ["", " ", "A", "don't 'tis x-y", "\v\x1c a\tb\nc\fd\re ", "ÉTÉ été 数学 a\u3000b x\u200by", "😀", "ab" * 5000,
             "  lead and trail  ", "\x00\x01", "Zz09", "ä" * 3 + " " + "ß"]
    for batch in (texts, texts[:1], texts[3:4], [t for t in texts if t.isascii()], ["x y"] * 3, [""] * 4):
        a = pa.array(batch, pa.large_string())
        for ascii_only in ((True, False) if all(t.isascii() for t in batch) else (False,)):
            got = tk._split(a, ascii_only)
            got.validate(full=True)
            assert got.equals(ref.split_numpy(a, ascii_only)) and got.null_count == ref.split_numpy(a, ascii_only).null_count
    # a sliced array (its offsets do not start at 0)
    a = pa.array(texts, pa.large_string()).slice(2, 6)
    assert tk._split(a, False).equals(ref.split_numpy(a, False))


def test_word_keys_equal_words_hashed_and_joined():
    # split_hash_words: the words of split_numpy, xxh64 of each (every length around the 4/8/32-byte
    # lanes) and the normalised text of the Arrow join, in one pass
    texts = ["", " ", "A", "don't 'tis x-y", "\v\x1c a\tb\nc\fd\re ", "ÉTÉ été 数学 a\u3000b x\u200by", "😀", "ab" * 5000,
             "  lead and trail  ", "\x00\x01", "Zz09", "ä" * 3 + " " + "ß", "?! ...", "ＡＢＣ ﬁx ½",
             " ".join("w" * n for n in range(1, 70)), "q" * 33 + "-" + "r" * 31]
    for batch in (texts, texts[:1], [t for t in texts if t.isascii()], [""] * 4, [], texts[4:5]):
        for typ in (pa.large_string(), pa.string()):
            a = pa.array(batch, typ)
            for arr in (a, a.slice(1, max(len(a) - 2, 0))):
                got = tk.word_keys(arr)
                wl = ref.split_numpy(*tk._prepared(arr)) if len(arr) else tk.words(arr)
                h = ref._xxh64(wl.flatten()) if len(wl.flatten()) else np.zeros(0, np.uint64)
                off = np.asarray(wl.offsets, np.int64) - int(wl.offsets[0].as_py()) if len(wl) else np.zeros(1, np.int64)
                norm = tk.join_words(wl)
                assert got.hashes.dtype == np.uint64 and np.array_equal(got.hashes, h)
                assert got.offsets.dtype == np.int64 and np.array_equal(got.offsets, off)
                assert bytes(got.text) == b"".join(s.encode() for s in norm.to_pylist())
                assert np.array_equal(np.diff(got.text_offsets), pc.binary_length(norm).to_numpy(zero_copy_only=False))
                assert got.exact_keys() == ref.exact_keys(norm)


def test_textkeys_byte_classes_are_the_kernels():
    assert (tk._KEEP, tk._DROP, tk._SPACE) == (kernels_jit.KEEP, kernels_jit.DROP, kernels_jit.SPACE)


def test_loading_the_definitions_does_not_load_numba():
    """numba (~150 MB resident, ~0.5 s) loads only in a process that runs a kernel: not in the code
    server, nor in a step process of the multiprocess executor that never normalises text."""
    import subprocess
    import sys

    code = "import sys, mix_assets.definitions; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_process_running_a_kernel_does_not_import_scipy_linalg():
    """numba's BLAS probe (numba.np.arraymath imports scipy.linalg) is skipped (core/kernels_jit._load_arraymath):
    a fresh process that normalises, hashes and scans text never loads scipy.linalg; a numba function that
    needs BLAS still compiles and runs (it probes again itself)."""
    import subprocess
    import sys

    code = """
import sys
import numpy as np, pyarrow as pa
from mix_assets.core import kernels_jit, textkeys as tk
h, off = tk.word_hashes(tk.words(pa.array(["one two three four", "five six"], pa.large_string())))
kernels_jit.bitmap_hits(np.zeros(4, np.uint64), np.uint64(60), np.zeros(16, np.uint8))
print("scipy.linalg" in sys.modules)
import numba
print(numba.njit(lambda a, b: np.dot(a, b))(np.ones(3), np.ones(3)))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "3.0"]
