"""dedup_keys' stored verified pairs (dedup/pairs/<key>.parquet): a rerun compares only the pairs of changed
sources, and its dedup_keys bytes are always those of a reduce from scratch."""

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.core import layout, tables
from mix_assets.core.storage import Storage
from mix_assets.stages.dedup import dedup as lib
from mix_assets.stages.dedup import pairs

VOCAB = [f"w{k}" for k in range(3000)]


def _corpus(seed: int = 0) -> dict[str, list[str]]:
    """Four sources of 60-word texts; a third of each source's texts are near-copies (one word replaced,
    Jaccard ~0.84) of texts in any source, some exact copies."""
    rng = np.random.default_rng(seed)
    names = ["part_a", "part_b", "part_c", "part_d"]
    out = {n: [" ".join(rng.choice(VOCAB, 60)) for _ in range(24)] for n in names}
    for n in names:
        for k in range(0, 24, 3):
            src = out[names[int(rng.integers(4))]][int(rng.integers(24))].split()
            src[int(rng.integers(60))] = "changed"
            out[n][k] = " ".join(src)
    out["part_b"][1] = out["part_a"][2]
    return out


def _write(root, texts: dict[str, list[str]]) -> dict:
    files = {}
    for n, ts in texts.items():
        path = root / layout.RAW_DOCS.format(source=n)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"doc_id": [f"{n}-{k:03d}" for k in range(len(ts))], "text": ts,
                                 "n_chars": [len(t) for t in ts]}), path, row_group_size=10)
        files[n] = str(path)
    return files


def _run(root, texts, versions, params=None):
    """dedup_keys' lib work on storage `root` (raw files written there): (sha256 of dedup_keys.parquet, stats)."""
    files = _write(root, texts)
    storage = Storage(str(root))
    table, st = lib.dedup_keys_table(files, {n: 1 for n in texts}, params or lib.DedupParams(), storage=storage,
                                     raw_versions={n: versions.get(n, "v1") for n in texts})
    tables.write_parquet(storage, layout.DEDUP_KEYS, table)
    return hashlib.sha256((root / layout.DEDUP_KEYS).read_bytes()).hexdigest(), st


def _fresh(tmp_path, texts, versions, params=None):
    return _run(tmp_path / f"fresh-{len(list(tmp_path.iterdir()))}", texts, versions, params)[0]


def _pair_files(root) -> dict:
    folder = root / "dedup" / "pairs"
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.iterdir()} if folder.exists() else {}


def test_a_rerun_reuses_every_pair_and_writes_the_same_bytes(tmp_path):
    texts, root = _corpus(), tmp_path / "s"
    first, st = _run(root, texts, {})
    assert st["pairs_reused"] == 0 and st["pairs_compared"] > 0 and st["confirmed_pairs"] > 0
    stored = _pair_files(root)
    assert 1 < len(stored) <= 10  # a file per pair of sources (each with itself too) holding candidates
    again, st2 = _run(root, texts, {})
    assert again == first
    assert st2["pairs_compared"] == 0 and st2["pairs_reused"] >= st["candidate_pairs"]
    assert _pair_files(root) == stored  # written once, never replaced


def _changed(texts):
    """part_c edited: a near-copy made far from its original, another one a little further (still a
    candidate, now below the threshold), a text replaced by a near-copy of part_a's."""
    out = {n: list(ts) for n, ts in texts.items()}
    words = out["part_c"][3].split()
    words[40] = "further"
    out["part_c"][3] = " ".join(words)
    words = out["part_c"][0].split()
    out["part_c"][0] = " ".join(words[:30] + [f"new{k}" for k in range(30)])
    words = out["part_a"][5].split()
    words[7] = "edited"
    out["part_c"][4] = " ".join(words)
    return out


def test_a_changed_source_compares_only_its_pairs_and_matches_a_reduce_from_scratch(tmp_path, monkeypatch):
    texts, root = _corpus(), tmp_path / "s"
    _run(root, texts, {})
    new = _changed(texts)
    misses = []
    real = pairs.PairStore.cached

    def cached(self, a, b):
        hit, vals = real(self, a, b)
        sa, _, sb, _ = self._split(np.asarray(a), np.asarray(b))
        misses.extend(zip(sa[~hit].tolist(), sb[~hit].tolist()))
        return hit, vals

    monkeypatch.setattr(pairs.PairStore, "cached", cached)
    got, st = _run(root, new, {"part_c": "v2"})
    # every pair compared involves part_c (source 2): those among the other three came from the stored files
    assert misses and all(2 in m for m in misses)
    assert st["pairs_reused"] > 0 and 0 < st["pairs_compared"] < st["candidate_pairs"]
    assert got == _fresh(tmp_path, new, {"part_c": "v2"})


def test_a_cache_keyed_without_the_raw_version_would_give_other_bytes(tmp_path, monkeypatch):
    """The test above can fail: with the sources' identities reduced to their names, part_c's stale Jaccards
    are taken for its edited texts and dedup_keys differs from a reduce from scratch."""
    texts, root = _corpus(), tmp_path / "s"
    real = pairs.source_identity
    monkeypatch.setattr(pairs, "source_identity", lambda *a: {"source": real(*a)["source"]})
    _run(root, texts, {})
    new = _changed(texts)
    got, _ = _run(root, new, {"part_c": "v2"})
    assert got != _fresh(tmp_path, new, {"part_c": "v2"})


def test_an_added_and_a_removed_source_match_a_reduce_from_scratch(tmp_path):
    texts, root = _corpus(), tmp_path / "s"
    _run(root, texts, {})
    rng = np.random.default_rng(9)
    copies = [t.replace(t.split()[20], "copied", 1) for t in texts["part_b"][:6]]  # near-copies of part_b's
    added = dict(texts, part_e=[" ".join(rng.choice(VOCAB, 60)) for _ in range(10)] + copies)
    got, st = _run(root, added, {})
    assert got == _fresh(tmp_path, added, {})
    assert st["pairs_reused"] > 0 and st["pairs_compared"] > 0
    removed = {n: ts for n, ts in texts.items() if n != "part_b"}
    got, st = _run(root, removed, {})
    assert got == _fresh(tmp_path, removed, {})
    assert st["pairs_compared"] == 0  # the pairs among the remaining sources are all stored


@pytest.mark.parametrize("change", [{"shingle": 4}, {"num_perm": 64}, {"seed": 7}])
def test_a_parameter_of_the_signatures_or_sets_invalidates_every_stored_pair(tmp_path, change):
    """Every file keyed by the sources' identities goes; the pairs keyed by text stay valid unless the shingle
    size changed (a Jaccard depends on the two texts and the shingles, not on num_perm or the seed)."""
    texts, root = _corpus(), tmp_path / "s"
    _run(root, texts, {})
    params = lib.DedupParams(**change)
    got, st = _run(root, texts, {}, params)
    assert st["pairs_reused"] == st["pairs_reused_by_text"]
    assert (st["pairs_reused"] == 0) == ("shingle" in change)
    assert got == _fresh(tmp_path, texts, {}, params)


def test_a_new_threshold_reuses_the_jaccards_and_matches_a_reduce_from_scratch(tmp_path):
    """The threshold decides which verified pairs are edges, not their Jaccards: those stay valid."""
    texts, root = _corpus(), tmp_path / "s"
    _run(root, texts, {})
    params = lib.DedupParams(threshold=0.9)
    got, st = _run(root, texts, {}, params)
    assert got == _fresh(tmp_path, texts, {}, params)


def test_without_reuse_no_pair_is_stored(tmp_path):
    texts, root = _corpus(), tmp_path / "s"
    files = _write(root, texts)
    storage = Storage(str(root))
    lib.sign_sources(storage, files, {n: "v1" for n in texts}, lib.DedupParams(), lib.engine.Engine())
    _, st = lib.reduce_signatures(storage, files, {}, lib.DedupParams(), reuse_pairs=False)
    assert st["pairs_reused"] == 0 and not _pair_files(root)


def _appended(texts, rng_seed: int = 5):
    """part_c's sample changed as an append changes it: two rows gone from the middle (every later row moves),
    new texts at the end, among them near-copies of each other and of part_a's, and a text edited in place."""
    rng = np.random.default_rng(rng_seed)
    out = {n: list(ts) for n, ts in texts.items()}
    c = out["part_c"]
    del c[10], c[4]
    fresh = [" ".join(rng.choice(VOCAB, 60)) for _ in range(4)]
    copies = [t.replace(t.split()[30], "appended", 1) for t in (fresh[0], out["part_a"][7], out["part_c"][2])]
    c += fresh + copies
    words = c[5].split()
    words[3] = "inplace"
    c[5] = " ".join(words)
    return out


def test_an_append_that_moves_a_sources_rows_compares_only_pairs_touching_new_texts(tmp_path, monkeypatch):
    """part_c gets a new identity and its rows move: the identity files answer only the pairs among the other
    sources, the pairs keyed by text every pair of unchanged texts; the bytes are a from-scratch reduce's."""
    texts, root = _corpus(), tmp_path / "s"
    _run(root, texts, {})
    new = _appended(texts)
    old_texts = {t for ts in texts.values() for t in ts}
    misses = []
    real = pairs.first_hit

    def first_hit(*lookups):
        cached = real(*lookups)

        def recording(a, b):
            hit, vals = cached(a, b)
            misses.extend(zip(np.asarray(a)[~hit].tolist(), np.asarray(b)[~hit].tolist()))
            return hit, vals
        return recording

    monkeypatch.setattr(pairs, "first_hit", first_hit)
    got, st = _run(root, new, {"part_c": "v2"})
    rerun_misses = list(misses)
    assert got == _fresh(tmp_path, new, {"part_c": "v2"})
    misses = rerun_misses
    assert st["pairs_reused_by_text"] > 0 and st["pairs_compared"] > 0
    # every pair compared again holds a text the first reduce did not see (input index: sources sorted, raw rows)
    flat = [t for n in sorted(new) for t in new[n]]
    assert len(misses) == st["pairs_compared"]
    assert all(flat[a] not in old_texts or flat[b] not in old_texts for a, b in misses)


def test_pairs_keyed_by_doc_id_instead_of_text_would_give_other_bytes(tmp_path, monkeypatch):
    """The test above can fail: keyed by what names a document (its doc_id) rather than its text, the Jaccards of
    part_c's text edited in place are taken from before the edit and dedup_keys differs from a from-scratch reduce."""
    texts, root = _corpus(), tmp_path / "s"

    def by_doc_id(self, docs):
        docs = np.asarray(docs, np.int64)
        src = np.searchsorted(self.starts, docs, side="right") - 1
        return np.array([f"{s}-{d - self.starts[s]:060d}" for s, d in zip(src.tolist(), docs.tolist())], "S64")

    monkeypatch.setattr(pairs.TextPairs, "keys", by_doc_id)
    monkeypatch.setattr(pairs.PairStore, "cached", lambda self, a, b: (np.zeros(len(a), bool), np.zeros(len(a))))
    _run(root, texts, {})
    new = _changed(texts)
    got, _ = _run(root, new, {"part_c": "v2"})
    assert got != _fresh(tmp_path, new, {"part_c": "v2"})


def test_without_the_pairs_keyed_by_text_an_append_compares_pairs_of_unchanged_texts(tmp_path, monkeypatch):
    """The append test above can fail: with only the identity files (main before TextPairs), part_c's new
    identity makes every pair involving it a miss, including pairs of two texts the first reduce compared."""
    texts, root = _corpus(), tmp_path / "s"
    _run(root, texts, {})
    new = _appended(texts)
    old_texts = {t for ts in texts.values() for t in ts}
    monkeypatch.setattr(pairs.TextPairs, "cached", lambda self, a, b: (np.zeros(len(a), bool), np.zeros(len(a))))
    misses = []
    real = pairs.first_hit

    def first_hit(*lookups):
        cached = real(*lookups)

        def recording(a, b):
            hit, vals = cached(a, b)
            misses.extend(zip(np.asarray(a)[~hit].tolist(), np.asarray(b)[~hit].tolist()))
            return hit, vals
        return recording

    monkeypatch.setattr(pairs, "first_hit", first_hit)
    _run(root, new, {"part_c": "v2"})
    flat = [t for n in sorted(new) for t in new[n]]
    assert any(flat[a] in old_texts and flat[b] in old_texts for a, b in misses)
