"""stages/tokens/shards.py on core/engine.py: token_shards writes the same bytes on any engine (issue 13 §1, §5, §6).

The tokenising runs as map tasks (`encode_chunk` over row ranges); shard files and shard_stats.json
must not depend on the engine, its worker count or the chunk size. One local Ray instance (2 CPUs)
for the module, as in core/test_engine.py; "Ray 1" is the engine with num_cpus 1 on it (a window of 2).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from mix_assets.core import engine as eng
from mix_assets.core import layout
from mix_assets.stages.tokens import shards
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.core.storage import Storage
from mix_assets.stages.tokens.tokenizer import build_tokenizer
from mix_assets_tests.support import tokens_stage
from mix_assets_tests.support.ray_local import LogLines, local_ray
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec

KW = dict(epochs={"a": 2.5, "b": 1.3}, packing={"separator": "<|endoftext|>"})
BASE = eng.Engine(num_cpus=1)  # one chunk per source: the whole file in one task, like the old single pass
LOCAL = {"local-1": eng.Engine(num_cpus=1, chunk_rows=90), "local-2": eng.Engine(num_cpus=2, chunk_rows=90),
         "local-4": eng.Engine(num_cpus=4, chunk_rows=64),
         "local-2-rows37": eng.Engine(num_cpus=2, chunk_rows=37)}
RAY = {"ray-1": eng.Engine(kind="ray", num_cpus=1, chunk_rows=101),
       "ray-2": eng.Engine(kind="ray", num_cpus=2, chunk_rows=37)}


@pytest.fixture(scope="module")
def ray_instance():
    with local_ray(RAY["ray-2"]) as ray:
        yield ray


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards_engine")
    spec = tiny_spec(root, **KW)
    st = write_upstream(root, {s.name: 400 for s in spec.sources}, near_dups=10, masked=5)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    return root, spec, st


def _outputs(root: Path) -> dict[str, bytes]:
    """Every shard file and shard_stats.json, by path."""
    files = [*sorted((root / layout.MIX_DIR).rglob("*.bin")), root / layout.SHARD_STATS]
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def _build(upstream, engine: eng.Engine) -> tuple[dict[str, bytes], tuple, list[str]]:
    root, spec, st = upstream
    log = LogLines()
    st.delete_prefix(layout.TOKEN_CACHE_DIR)  # every build encodes every document (test_token_cache.py: with it)
    res = shards.build_token_shards(st, spec, eng=engine, log=log)
    counts = (res.encoded_bytes, res.encoded_tokens, res.rounds,
              {s: r.encoded_train_documents for s, r in res.sources.items()})
    return _outputs(root), counts, log.lines


def test_same_bytes_with_1_2_4_threads_and_any_chunk_size(upstream):
    want, counts, lines = _build(upstream, BASE)
    assert len(want) > 3 and counts[1] > 0
    assert lines[-2].startswith("token_shards encode: ") and "done in" in lines[-2]
    assert lines[-1].startswith("token_shards: encoded ") and ", 0 from the token cache" in lines[-1]
    for name, e in LOCAL.items():
        got, got_counts, _ = _build(upstream, e)
        assert got == want, name
        assert got_counts == counts, name  # the same documents are encoded, whatever the chunks


@pytest.mark.ray
def test_same_bytes_on_ray_with_1_and_2_cpus(upstream, ray_instance):
    want, counts, _ = _build(upstream, BASE)
    for name, e in RAY.items():
        got, got_counts, _ = _build(upstream, e)
        assert got == want, name
        assert got_counts == counts, name


@pytest.mark.ray
def test_token_shards_asset_runs_on_the_bound_engine(tmp_path, ray_instance):
    spec, assets, res = tokens_stage.setup(tmp_path, engine={"kind": "ray", "chunk_rows": 53}, **KW)
    sel = dg.AssetSelection.assets("validation_split", "tokenizer", "token_shards")
    result = tokens_stage.run(assets, res, selection=sel)
    assert result.success and ray_instance.is_initialized()  # the module's instance was used and left up
    root = tmp_path / "storage"
    on_ray = _outputs(root)
    shards.build_token_shards(Storage(str(root)), spec, eng=BASE)
    assert _outputs(root) == on_ray


def test_a_task_refuses_a_tokenizer_that_changed(upstream, tmp_path):
    _, _, st = upstream
    path = tmp_path / "tokenizer.json"
    path.write_bytes(Path(st.local_path(layout.TOKENIZER_FILE)).read_bytes())
    loc = shards.TokenizerFile.of(str(path))
    path.write_text(path.read_text().replace('"<|endoftext|>"', '"<|end|>"', 1))
    with pytest.raises(ValueError, match="tokenizer.json: sha256 .* is not the tokenizer this build started"):
        shards.tokenizer_at(loc)


def test_shards_are_not_written_or_deleted_through_a_symlink_out_of_the_storage_root(tmp_path, tmp_path_factory):
    from mix_assets.core.storage import StorageLinkError

    spec = tiny_spec(tmp_path)
    st = write_upstream(tmp_path, {"a": 200, "b": 200})
    build_validation_split(st, ["a", "b"], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    elsewhere = tmp_path_factory.mktemp("old_train")
    (elsewhere / "train-00000.bin").write_bytes(b"an older build's shard, or someone else's file")
    (tmp_path / "mix" / "train").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(StorageLinkError, match=rf"mix/train is a symlink to {elsewhere}, outside the storage root"):
        shards.build_token_shards(st, spec, eng=BASE)
    assert [p.read_bytes()[:8] for p in elsewhere.iterdir()] == [b"an older"]  # before: deletion skipped, rewritten


def test_a_null_text_is_named_by_file_and_document(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = tiny_spec(tmp_path)
    st = write_upstream(tmp_path, {"a": 200, "b": 200})
    build_validation_split(st, ["a", "b"], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    val = pq.read_table(st.local_path(layout.VALIDATION_SPLIT)).to_pylist()
    bad = next(r["doc_id"] for r in val if r["source"] == "b" and r["split"] == "val")  # always encoded
    path = st.local_path(layout.RAW_DOCS.format(source="b"))
    t = pq.read_table(path)
    ids, texts = t.column("doc_id").to_pylist(), t.column("text").to_pylist()
    texts = [None if d == bad else x for d, x in zip(ids, texts)]
    pq.write_table(t.set_column(t.schema.get_field_index("text"), "text", pa.array(texts, pa.string())), path)
    with pytest.raises(ValueError, match=rf"b/documents.parquet: document '{bad}': field text is null"):
        shards.build_token_shards(st, spec, eng=eng.Engine(num_cpus=2, chunk_rows=50))


def test_each_round_is_one_map_over_every_source(upstream, monkeypatch):
    """Round 0 (every source's val documents) and each train round are ONE map call with the chunks of
    every source still short, in source order, so a source's last chunks do not leave workers idle."""
    root, spec, st = upstream
    calls, real = [], eng.map_chunks

    def spy(fn, chunks, engine):
        chunks = list(chunks)
        calls.append([c.rows.path for c in chunks])
        return real(fn, chunks, engine)

    monkeypatch.setattr(eng, "map_chunks", spy)
    st.delete_prefix(layout.TOKEN_CACHE_DIR)  # every document encoded (no lookup map)
    res = shards.build_token_shards(st, spec, eng=LOCAL["local-2"])
    assert len(calls) == 1 + max(res.rounds.values())
    raw = {str(st.local_path(layout.RAW_DOCS.format(source=s.name))) for s in spec.sources}
    for paths in calls[:2]:
        assert {str(p) for p in paths} == raw and paths == sorted(paths, key=str)
