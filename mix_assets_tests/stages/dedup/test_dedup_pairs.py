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
    texts, root = _corpus(), tmp_path / "s"
    _run(root, texts, {})
    params = lib.DedupParams(**change)
    got, st = _run(root, texts, {}, params)
    assert st["pairs_reused"] == 0
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
