import random
import tracemalloc

import datasketch
import numpy as np
import pyarrow as pa
import pytest

from mix_assets.stages.dedup import minhash as mh
from mix_assets.core import textkeys as tk
from mix_assets_tests.support.shared_data import long_text, paragraphs


def datasketch_signature(text: str, num_perm: int = 128, seed: int = 1, n: int = 5) -> np.ndarray:
    """datasketch MinHash fed the reference shingle hashes (pure Python) of the normalised words."""
    words = tk.normalise([text]).to_pylist()[0].split()
    m = datasketch.MinHash(num_perm=num_perm, seed=seed, hashfunc=lambda h: h & 0xFFFFFFFF)
    m.update_batch(tk.ngram_hash_reference(words, n))
    return m.hashvalues


def real_docs(k: int = 40) -> list[str]:
    ps = paragraphs("sherlock_holmes")
    return ["\n\n".join(ps[i : i + 4]) for i in range(0, 4 * k, 4)]


@pytest.mark.parametrize("num_perm,seed", [(128, 1), (64, 42)])
def test_signatures_equal_datasketch_minhash(num_perm, seed):
    rng = random.Random(seed)
    docs = real_docs(30) + [
        "",
        "   \n\t ",
        "!!! ...",
        "three short words",
        "Ελληνικά κείμενα, και русский текст! " * 7,
        " ".join(rng.choice(["a", "b", "c", "d"]) for _ in range(500)),  # many repeated shingles
    ]
    got = mh.sign_texts(docs, num_perm=num_perm, seed=seed, threads=2, batch_bytes=4096).signatures
    assert got.dtype == np.uint32 and got.shape == (len(docs), num_perm)
    for i, d in enumerate(docs):
        assert np.array_equal(got[i], datasketch_signature(d, num_perm, seed)), i


def test_permutations_are_datasketchs():
    a, b = mh.permutations(128, 1)
    ref = datasketch.MinHash(num_perm=128, seed=1).permutations
    assert np.array_equal(a, ref[0]) and np.array_equal(b, ref[1])


def test_result_independent_of_threads_and_batching():
    docs = real_docs(60)
    one = mh.sign_texts(docs, threads=1, batch_bytes=1 << 30)
    two = mh.sign_texts(docs, threads=2, batch_bytes=3000)
    assert np.array_equal(one.signatures, two.signatures)
    assert one.exact_keys == two.exact_keys
    wl = tk.words(docs)
    h, off = tk.word_hashes(wl)
    sh, soff = tk.ngram_hashes(h, off, 5)
    a, b = mh.permutations(128)
    got = mh.signatures_from_hashes(mh.shingle_hash32(sh), soff, a, b)
    assert np.array_equal(got, one.signatures)


def test_empty_and_whitespace_documents_have_no_shingles():
    batch = mh.sign_texts(["", "  \n\t", "?!", None, "real words here and there"])
    assert batch.n_words.tolist()[:4] == [0, 0, 0, 0]
    assert batch.n_shingles.tolist() == [0, 0, 0, 0, 1]
    assert (batch.signatures[:4] == mh.EMPTY).all()
    # all normalise to "": keyed on the raw text up to whitespace instead (issue 25), so "?!" differs
    assert batch.exact_keys[0] == batch.exact_keys[1] == batch.exact_keys[3] != batch.exact_keys[2]


def test_short_document_is_one_whole_shingle():
    # Fewer than 5 words: one shingle over all words, the same as datasketch over that shingle.
    batch = mh.sign_texts(["Hello there, world!", "hello THERE world", "hello there planet"])
    assert batch.n_shingles.tolist() == [1, 1, 1]
    assert np.array_equal(batch.signatures[0], batch.signatures[1])  # same words: identical
    assert mh.jaccard_estimate(batch.signatures[0], batch.signatures[2]) < 0.1  # one word differs
    assert np.array_equal(batch.signatures[0], datasketch_signature("Hello there, world!"))


def test_long_document_signature_memory_is_bounded():
    text = long_text(2_000_000)  # ~ 350k shingles: an unchunked n x 128 uint32 matrix is ~180 MB
    wl = tk.words([text])
    h, off = tk.word_hashes(wl)
    sh, soff = tk.ngram_hashes(h, off, 5)
    h32 = mh.shingle_hash32(sh)
    a, b = mh.permutations(128)
    assert len(h32) > 300_000
    tracemalloc.start()
    sig = mh.signatures_from_hashes(h32, soff, a, b)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * len(h32) + (8 << 20), peak  # O(n) scalars + the fixed 4 MiB work matrix
    x = mh.fmix32(h32).astype(np.uint64)
    ref = np.full(128, 0xFFFFFFFF, dtype=np.uint64)
    for s in range(0, len(x), 20_000):  # the affine map in 64-bit arithmetic, reduced mod 2^32
        block = (x[s : s + 20_000, None] * a.astype(np.uint64) + b) & np.uint64(0xFFFFFFFF)
        ref = np.minimum(ref, block.min(axis=0))
    assert np.array_equal(sig[0], ref.astype(np.uint32))


def test_non_ascii_near_duplicates_and_unicode_normalisation():
    rng = random.Random(1)
    vocab = "съешь же ещё этих мягких французских булок да выпей чаю Ελληνικά κείμενα και".split()
    words = [rng.choice(vocab) for _ in range(300)]
    base = " ".join(words)
    edited = " ".join(words[:150] + ["Ünïcödé"] + words[150:])
    fullwidth = "ＴＨＥ ＱＵＩＣＫ ｂｒｏｗｎ ｆｏｘ ｊｕｍｐｓ ｏｖｅｒ ｔｈｅ ｌａｚｙ ｄｏｇ"
    batch = mh.sign_texts([base, edited, fullwidth, "the quick brown fox jumps over the lazy dog", "数学 问题：3 + 4 = 7。"])
    assert mh.jaccard_estimate(batch.signatures[0], batch.signatures[1]) > 0.85
    assert batch.n_words[0] == 300
    assert batch.exact_keys[2] == batch.exact_keys[3]
    assert batch.n_words[4] > 0


def test_estimates_track_exact_jaccard_on_real_near_duplicates():
    rng = random.Random(5)
    docs = real_docs(40)
    edited = []
    for d in docs:
        w = d.split(" ")
        for _ in range(max(1, len(w) // 60)):
            w[rng.randrange(len(w))] = rng.choice(w)
        edited.append(" ".join(w))
    batch = mh.sign_texts(docs + edited)
    wl = tk.words(docs + edited)
    h, off = tk.word_hashes(wl)
    sh, soff = tk.ngram_hashes(h, off, 5)
    n = len(docs)
    errs = []
    for i in range(n):
        a, b = set(sh[soff[i] : soff[i + 1]].tolist()), set(sh[soff[n + i] : soff[n + i + 1]].tolist())
        exact = len(a & b) / len(a | b)
        errs.append(abs(mh.jaccard_estimate(batch.signatures[i], batch.signatures[n + i]) - exact))
    assert np.mean(errs) < 0.04, np.mean(errs)


def test_accepts_arrow_arrays_and_chunked_arrays():
    docs = real_docs(5)
    a = mh.sign_texts(pa.chunked_array([docs[:2], docs[2:]]))
    b = mh.sign_texts(docs)
    assert np.array_equal(a.signatures, b.signatures)
