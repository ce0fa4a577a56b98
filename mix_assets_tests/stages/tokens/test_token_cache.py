"""stages/tokens/idcache.py: token_shards' token-id cache (issue 27, Build 4 and 5, the token stage).

Every build here is compared with one that does not use the cache (`token_cache=False`): the shards,
document indexes, stream docs and shard_stats.json must be the same bytes whatever the cache holds (empty,
full, some parts deleted, parts of a SIGKILLed build, documents appended or edited since), and only the
documents the cache lacks are encoded (counted from the build's result and its log line).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.core import engine as eng
from mix_assets.core import layout
from mix_assets.core.storage import Storage
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.stages.tokens import idcache, shards
from mix_assets.stages.tokens import metadata as md
from mix_assets.stages.tokens.tokenizer import build_tokenizer
from mix_assets_tests.support.ray_local import LogLines
from mix_assets_tests.support.tokens_fixtures import make_text, write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec

REPO = Path(__file__).resolve().parents[3]
KW = dict(epochs={"a": 2.5, "b": 1.3}, packing={"separator": "<|endoftext|>"})
ENGINE = eng.Engine(num_cpus=2, chunk_rows=37)  # several chunks, so several parts, per source


@pytest.fixture(autouse=True)
def _one_part_per_chunk(monkeypatch):
    """Each encoded chunk stored as a part of its own (CACHE_PART_DOCS 1), so a source has several: the lookups
    and the partial caches below need them; test_small_chunks_are_gathered_into_parts covers the default."""
    monkeypatch.setattr(shards, "CACHE_PART_DOCS", 1)


def _upstream(root: Path):
    spec = tiny_spec(root, **KW)
    st = write_upstream(root, {s.name: 400 for s in spec.sources}, near_dups=10, masked=5)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    return spec, st


def _outputs(root: Path) -> dict[str, bytes]:
    """Every file token_shards writes, by path: shards, doc indexes, stream docs, shard_stats.json."""
    files = [*sorted(p for p in (root / layout.MIX_DIR).rglob("*") if p.is_file() and "tokenizer" not in p.parts),
             *sorted((root / "tokens" / "stream_docs").glob("*.parquet")), root / layout.SHARD_STATS]
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def _parts(root: Path, source: str | None = None) -> list[Path]:
    return sorted((root / layout.TOKEN_CACHE_DIR).glob(f"*/{source or '*'}/part-*.parquet"))


def _rows(parts: list[Path]) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in parts)


def _build(spec, st, **kw):
    log = LogLines()
    res = shards.build_token_shards(st, spec, eng=ENGINE, log=log, **kw)
    return res, _outputs(Path(st.root)), log.lines[-1]


def test_same_bytes_with_an_empty_a_full_and_a_partial_cache(tmp_path):
    spec, st = _upstream(tmp_path)
    ref, want, _ = _build(spec, st, token_cache=False)
    assert len(want) > 6 and not _parts(tmp_path)

    empty, got, line = _build(spec, st)  # empty cache: everything encoded, every chunk stored
    assert got == want
    n = {s: m for s, (h, m) in empty.cache_docs.items()}
    assert all(h == 0 for h, _ in empty.cache_docs.values()) and sum(n.values()) > 200
    assert n == {s: m for s, (_, m) in ref.cache_docs.items()}
    assert (empty.encoded_bytes, empty.encoded_tokens) == (ref.encoded_bytes, ref.encoded_tokens)
    assert _rows(_parts(tmp_path)) == sum(n.values()) and len(_parts(tmp_path, "a")) > 3
    assert line.startswith(f"token_shards: encoded {sum(n.values()):,} documents, 0 from the token cache")

    full, got, line = _build(spec, st)  # full cache: nothing encoded
    assert got == want
    assert full.cache_docs == {s: (m, 0) for s, m in n.items()}
    assert (full.encoded_bytes, full.encoded_tokens) == (0, 0)
    assert f"encoded 0 documents, {sum(n.values()):,} from the token cache" in line
    assert f"tokenizer {st.sha256(layout.TOKENIZER_FILE)[:12]}" in line

    # partial: half of source a's parts gone, and the temporary file of a write that was killed
    before = [p.name for p in _parts(tmp_path, "a")]
    gone = _parts(tmp_path, "a")[::2]
    lost = _rows(gone)
    for p in gone:
        p.unlink()
    (gone[0].parent / f".{gone[0].name}.x1y2.tmp").write_bytes(b"half a part")
    part, got, _ = _build(spec, st)
    assert got == want
    assert part.cache_docs == {"a": (n["a"] - lost, lost), "b": (n["b"], 0)}
    assert [p.name for p in _parts(tmp_path, "a")] == before  # the re-encoded chunks stored again, same names

    meta = md.token_cache(part)
    assert (meta["encoded_documents"], meta["cached_documents"]) == (lost, sum(n.values()) - lost)
    assert meta["token_cache"].data["sources"]["a"] == {"cached": n["a"] - lost, "encoded": lost}


def _edit_raw(st: Storage, source: str, changed: list[int], appended: int) -> None:
    """Rewrite raw/<source>: the texts of rows `changed` replaced (same doc_ids), `appended` new documents."""
    import random

    path = st.local_path(layout.RAW_DOCS.format(source=source))
    t = pq.read_table(path)
    rows = t.to_pylist()
    rng = random.Random(5)
    for i in changed:
        text = make_text(rng, 80)
        rows[i] = {**rows[i], "text": text, "n_bytes": len(text.encode()), "n_chars": len(text)}
    n = len(rows)
    for j in range(appended):
        text = make_text(rng, rng.randint(40, 160))
        rows.append({**rows[0], "doc_id": f"{source}-new{j:04d}", "text": text, "row_index": n + j,
                     "origin": f"gen:new{j}", "n_bytes": len(text.encode()), "n_chars": len(text)})
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), path)
    keys = pq.read_table(st.local_path(layout.DEDUP_KEYS))  # the new documents kept, each its own cluster
    new = [{"doc_id": r["doc_id"], "source": source, "exact_key": f"k-{r['doc_id']}", "cluster_id": r["doc_id"],
            "cluster_size": 1, "keep": True, "reason": None, "n_words": len(r["text"].split())} for r in rows[n:]]
    keys = pa.concat_tables([keys, pa.Table.from_pylist(new, schema=keys.schema)]).sort_by("doc_id")
    pq.write_table(keys, st.local_path(layout.DEDUP_KEYS))


def test_new_and_edited_documents_are_the_only_ones_encoded(tmp_path):
    """2 % new documents in source b and 5 edited texts (same doc_ids): only those are encoded, the
    bytes are a cacheless build's, and source a is read whole from the cache."""
    spec, st = _upstream(tmp_path)
    _build(spec, st)
    _edit_raw(st, "b", changed=[3, 50, 120, 200, 333], appended=8)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    ref, want, _ = _build(spec, st, token_cache=False)
    res, got, _ = _build(spec, st)
    assert got == want
    hit_a, miss_a = res.cache_docs["a"]
    hit_b, miss_b = res.cache_docs["b"]
    assert miss_a == 0 and hit_a > 100
    assert hit_b + miss_b == ref.cache_docs["b"][1] and hit_a == ref.cache_docs["a"][1]
    # encoded: the new or edited documents the build reads (at least those in its streams, at most those kept)
    fresh = {f"b-{i:06d}" for i in (3, 50, 120, 200, 333)} | {f"b-new{j:04d}" for j in range(8)}
    kept = fresh & set(pq.read_table(st.local_path(layout.VALIDATION_SPLIT)).column("doc_id").to_pylist())
    streamed = fresh & {d for sp in ("train", "val") for d in pq.read_table(
        st.local_path(layout.STREAM_DOCS.format(split=sp))).column("doc_id").to_pylist()}
    assert 0 < len(streamed) <= miss_b <= len(kept) and hit_b > 100


def test_the_cache_key_names_what_decides_the_ids(tmp_path):
    st = Storage(str(tmp_path))
    a = idcache.TokenCache(st, "0" * 64, "uint16")
    assert a.key == idcache.TokenCache(st, "0" * 64, "uint16").key
    assert len({a.key, idcache.TokenCache(st, "1" * 64, "uint16").key, idcache.TokenCache(st, "0" * 64, "uint32").key}) == 3
    assert a.meta["code"] == idcache._CODE and a.meta["add_special_tokens"] is False
    assert a.folder("web") == f"tokens/cache/{a.key}/web"
    keys = idcache.text_keys(pa.array(["x", "y", None]))
    assert keys.shape == (3, 16) and keys[0].tobytes() != keys[1].tobytes() and not keys[2].any()
    # ids with separators (7) as the spill holds them: stored without, read back with the separator asked for
    name = a.write("web", keys[:2], np.array([1, 1]), np.array([5, 6, 7, 9, 7], np.uint16), np.array([3, 2]), 7)
    assert name and a.write("web", keys[:2], np.array([1, 1]), np.array([5, 6, 7, 9, 7]), np.array([3, 2]), 7) is None
    got = [(idcache.text_keys(pa.array(["y", "z"])), np.zeros(2, bool)),
           (idcache.text_keys(pa.array(["x", "x"])), np.array([False, True]))]  # a second chunk; a null text
    hits = a.locate("web", a.parts("web"), iter(got))
    assert hits.pos.tolist() == [1, -1, 0, -1]
    (at, ids, lens, nbytes), = hits.read(st, np.array([2, 0]), a.dtype, None)
    assert at.tolist() == [0, 1] and ids.tolist() == [5, 6, 9] and lens.tolist() == [2, 1] and nbytes == 2
    # a part of another key in this key's folder is refused, naming it
    other = idcache.TokenCache(st, "1" * 64, "uint16")
    other.write("web", keys[2:], np.array([0]), np.array([4], np.uint16), np.array([1]), None)
    bad = Path(tmp_path, other.folder("web")).glob("part-*.parquet").__next__()
    os.replace(bad, Path(tmp_path, a.folder("web"), bad.name))
    with pytest.raises(ValueError, match=r"part-[0-9a-f]{16}\.parquet: not a token-id part of cache key"):
        a.locate("web", a.parts("web"), [(keys, np.zeros(3, bool))])


_KILLED = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from mix_assets.core import engine
from mix_assets.core.storage import Storage
from mix_assets.stages.tokens import idcache, shards
from mix_assets_tests.support.tokens_spec import tiny_spec
root = Path(sys.argv[1])
real_write = idcache.TokenCache.write
def slow(self, *a, **k):  # each stored chunk takes a while: the parent kills the build between two
    out = real_write(self, *a, **k)
    time.sleep(0.4)
    return out
idcache.TokenCache.write = slow
shards.CACHE_PART_DOCS = 1  # a part per chunk
spec = tiny_spec(root, epochs={"a": 2.5, "b": 1.3}, packing={"separator": "<|endoftext|>"})
shards.build_token_shards(Storage(str(root)), spec, eng=engine.Engine(num_cpus=1, chunk_rows=37))
"""


def test_a_sigkilled_build_resumes_with_the_parts_it_wrote(tmp_path):
    spec, st = _upstream(tmp_path)
    ref, want, _ = _build(spec, st, token_cache=False)
    p = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path), str(REPO)])
    try:
        deadline = time.monotonic() + 120
        while len(_parts(tmp_path)) < 3:
            assert p.poll() is None and time.monotonic() < deadline, "the build stored no 3 parts"
            time.sleep(0.02)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    assert p.returncode == -signal.SIGKILL  # killed, not finished
    stored = _rows(_parts(tmp_path))
    res, got, line = _build(spec, st)
    assert got == want
    hit, miss = (sum(v[i] for v in res.cache_docs.values()) for i in (0, 1))
    assert hit == stored > 0 and miss > 0
    assert res.cache_docs == {s: (h, m) for s, (h, m) in res.cache_docs.items()} and \
        {s: h + m for s, (h, m) in res.cache_docs.items()} == {s: m for s, (_, m) in ref.cache_docs.items()}
    assert f"encoded {miss:,} documents, {hit:,} from the token cache" in line


def test_small_chunks_are_gathered_into_parts(tmp_path, monkeypatch):
    """With CACHE_PART_DOCS > a chunk's documents, a source's chunks of one round share a part: every part but the
    last of each round holds >= CACHE_PART_DOCS documents; the same bytes, and a rebuild reads them all back."""
    spec, st = _upstream(tmp_path)
    ref, want, _ = _build(spec, st, token_cache=False)
    monkeypatch.setattr(shards, "CACHE_PART_DOCS", 60)
    chunks, real = [], shards.encode_chunk
    monkeypatch.setattr(shards, "encode_chunk", lambda chunk, params: chunks.append(chunk) or real(chunk, params))
    first, got, _ = _build(spec, st)
    assert got == want
    for s, (_, encoded) in first.cache_docs.items():
        rows = sorted(pq.ParquetFile(p).metadata.num_rows for p in _parts(tmp_path, s))
        assert sum(rows) == encoded and len(rows) >= 2
        assert sum(r < 60 for r in rows) <= 1 + first.rounds[s], (s, rows)  # val round + each train round
    assert len(_parts(tmp_path)) < len(chunks) / 2, (len(_parts(tmp_path)), len(chunks))
    again, got, _ = _build(spec, st)
    assert got == want and all(m == 0 for _, m in again.cache_docs.values())


def test_keys_sharing_their_first_8_bytes_never_match_the_wrong_document():
    a, b, c = (np.frombuffer(bytes(8) + bytes([i]) * 8, np.uint8) for i in (1, 2, 3))
    index = idcache._KeyIndex(np.stack([a, b]))
    assert index.lookup(np.stack([b, a, c]), np.zeros(3, bool)).tolist() == [-1, 0, -1]  # b: a miss, not a
    assert idcache._KeyIndex(np.stack([b])).lookup(np.stack([b, a]), np.zeros(2, bool)).tolist() == [0, -1]


def _text_key_records(st: Storage) -> dict[str, dict]:
    from mix_assets.core import objects

    return {r["input_keys"]["file"]: r for r in objects.keyed_records(st, idcache.TEXT_KEYS_ASSET)}


def test_raw_text_keys_are_filed_by_the_file_bytes_and_reused_only_while_those_bytes_and_the_blob_are_unchanged(
        tmp_path, monkeypatch):
    """The text keys token_shards looks the cache up with are filed per raw file's sha256: a rebuild reads the
    unchanged files' keys instead of reading and hashing their text; a changed raw file, or a filed blob whose
    bytes changed, is hashed again; the bytes are a cacheless build's every time."""
    from mix_assets.core import objects, transport

    spec, st = _upstream(tmp_path)
    _, want, _ = _build(spec, st, token_cache=False)
    first, got, _ = _build(spec, st)  # no part yet: the keys of the encoded rows are filed (the others not hashed)
    assert got == want and first.text_keys_reused == []
    raw = {s.name: transport.sha256_file(st.local_path(layout.RAW_DOCS.format(source=s.name))) for s in spec.sources}
    recs = _text_key_records(st)
    assert set(recs) == set(raw.values())

    hashed = []
    real = idcache.hash_chunk
    monkeypatch.setattr(idcache, "hash_chunk", lambda rows: hashed.append(rows.path) or real(rows))
    second, got, line = _build(spec, st)
    assert got == want and second.text_keys_reused == sorted(raw) and hashed == []
    assert "text keys of a, b read from the object store" in line
    assert sum(h for h, _ in second.cache_docs.values()) == sum(m for _, m in first.cache_docs.values())

    # a filed blob whose bytes changed (same size) is not used: that source's text is hashed again
    (sha,) = recs[raw["a"]]["outputs"].values()
    blob = Path(st.root, objects.object_key(sha))
    data = bytearray(blob.read_bytes())
    data[0] ^= 0xFF
    blob.write_bytes(bytes(data))
    third, got, _ = _build(spec, st)
    assert got == want and third.text_keys_reused == ["b"] and hashed
    assert all("raw/a/" in p for p in hashed) and not blob.exists()  # the changed blob removed, the keys filed again
    hashed.clear()
    assert _build(spec, st)[0].text_keys_reused == ["a", "b"] and hashed == []

    # a changed raw file: other bytes, another key; its keys hashed and filed whole
    hashed.clear()
    _edit_raw(st, "b", changed=[3, 50], appended=4)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    _, want, _ = _build(spec, st, token_cache=False)
    fourth, got, _ = _build(spec, st)
    assert got == want and "b" not in fourth.text_keys_reused and any("raw/b/" in p for p in hashed)
    new_b = transport.sha256_file(st.local_path(layout.RAW_DOCS.format(source="b")))
    rec = _text_key_records(st)[new_b]
    (sha,) = rec["outputs"].values()
    state = np.frombuffer(Path(st.root, objects.object_key(sha)).read_bytes(), np.uint8)[-pq.ParquetFile(
        st.local_path(layout.RAW_DOCS.format(source="b"))).metadata.num_rows:]
    assert (state == idcache.KNOWN).all()
