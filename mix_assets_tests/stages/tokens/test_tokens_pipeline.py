"""split -> tokenizer -> shards -> manifest through the stages' logic (no Dagster), on synthetic upstream files."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mix_assets.format.checker import check_manifest
from mix_assets.format.manifest import ManifestError, compute_fingerprint
from mix_assets.stages.manifest.builder import write_manifest
from mix_assets.stages.tokens.packing import ShortfallError
from mix_assets.stages.tokens.shards import build_token_shards
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.stages.tokens.tokenizer import build_tokenizer
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.oracles.tokens_reference import as_built, reference_shards
from mix_assets_tests.support.tokens_spec import tiny_spec

REPO = Path(__file__).resolve().parents[3]


def build(root: Path, **spec_kw):
    spec = tiny_spec(root, **spec_kw)
    st = write_upstream(root, {s.name: 400 for s in spec.sources}, near_dups=10, masked=5)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    res = build_token_shards(st, spec)
    man = write_manifest(st, name=spec.name, seed=spec.seed, spec_dump=spec.model_dump(mode="json"))
    return spec, st, res, man


def assert_self_consistent(man: dict, mix_dir: Path) -> None:
    """The reader's checker (structure + every file's size and sha256), plus the on-disk listing."""
    assert check_manifest(man, mix_dir) == []
    assert man["fingerprint"] == compute_fingerprint(man["files"])
    listed = {f["path"] for f in man["files"]}
    on_disk = {str(p.relative_to(mix_dir)) for p in mix_dir.rglob("*") if p.is_file()} - {"manifest.json"}
    assert listed == on_disk


def test_pipeline_manifest_contract(tmp_path):
    spec, st, res, man = build(tmp_path, epochs={"a": 2.0})
    mix_dir = tmp_path / "mix"
    assert spec.source("a").epochs == 2.0
    assert_self_consistent(man, mix_dir)
    assert json.loads((mix_dir / "manifest.json").read_text()) == man
    assert man["dtype"] == "uint16" and man["tokenizer"]["kind"] == "train"
    assert man["tokenizer"]["special_tokens"] == {"<|endoftext|>": 0}
    assert list(man["tokenizer"]["files"]) == ["tokenizer/tokenizer.json"]
    # budgets are filled exactly: N x share x epochs per source
    for s in spec.sources:
        assert man["sources"][s.name]["train_tokens"] == spec.stream_budget(s.name)
        assert man["sources"][s.name]["budget_tokens"] == spec.stream_budget(s.name)
    assert man["sources"]["a"]["train_tokens"] == 2 * man["sources"]["b"]["train_tokens"]
    assert man["splits"]["val"]["samples"] > 0 and man["totals"]["val_tokens"] > 0
    # file order: train shards, val shards, their document indexes, tokenizer, review
    paths = [f["path"] for f in man["files"]]
    kinds = [p.split("/")[0] for p in paths]
    assert kinds == sorted(kinds, key=["train", "val", "doc_index", "tokenizer", "review"].index)
    assert paths[-4:] == list(man["review"].values())
    # contiguous, no separator, seams measured
    assert man["packing"]["separator"] is None and 0 < man["splits"]["train"]["seam_rate"] <= 1
    # the validation documents never reach a train shard: val text is disjoint by doc id
    assert res.sources["a"].unique_documents <= res.sources["a"].encoded_train_documents


def test_separator_and_shifted_targets(tmp_path):
    spec, st, res, man = build(tmp_path, packing={"separator": "<|endoftext|>", "shifted_targets": True})
    assert man["packing"]["separator_id"] == 0 and man["packing"]["sample_len"] == 65
    train = np.concatenate([np.fromfile(tmp_path / "mix" / s["path"], "<u2")
                            for s in man["splits"]["train"]["shards"]])
    assert (train == 0).sum() >= man["splits"]["train"]["documents"] - 2 * len(spec.sources) - 1
    assert_self_consistent(man, tmp_path / "mix")


def test_shortfall_fails_naming_the_source(tmp_path):
    with pytest.raises(ShortfallError, match=r"source 'b' cannot fill its token budget"):
        build(tmp_path, shares={"a": 0.2, "b": 0.8}, target_tokens=200_000)


def test_rebuild_removes_stale_shards(tmp_path):
    build(tmp_path)
    (tmp_path / "mix" / "train" / "train-00999.bin").write_bytes(b"old")
    spec, st, res, man = build(tmp_path)
    assert not (tmp_path / "mix" / "train" / "train-00999.bin").exists()
    assert_self_consistent(man, tmp_path / "mix")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("built")
    return build(root)


def _copy_mix(built, tmp_path) -> tuple[Path, dict]:
    import shutil

    spec, st, res, man = built
    dst = tmp_path / "mix"
    shutil.copytree(Path(st.root) / "mix", dst)
    return dst, json.loads((dst / "manifest.json").read_text())


def test_flipped_byte_in_a_shard_is_named(built, tmp_path):
    mix_dir, man = _copy_mix(built, tmp_path)
    shard = man["splits"]["train"]["shards"][1]["path"]
    data = bytearray((mix_dir / shard).read_bytes())
    data[100] ^= 0x01
    (mix_dir / shard).write_bytes(bytes(data))
    with pytest.raises(ManifestError) as e:
        check_manifest(man, mix_dir)
    assert shard in str(e.value) and hashlib.sha256(bytes(data)).hexdigest() in str(e.value)


def test_missing_shard_is_named(built, tmp_path):
    mix_dir, man = _copy_mix(built, tmp_path)
    shard = man["splits"]["val"]["shards"][0]
    (mix_dir / shard["path"]).unlink()
    problems = check_manifest(man, mix_dir, strict=False)
    assert any(shard["path"] in p and "not found" in p and str(shard["bytes"]) in p for p in problems)


def test_totals_off_by_one_are_named(built, tmp_path):
    mix_dir, man = _copy_mix(built, tmp_path)
    right = man["totals"]["train_tokens"]
    man["totals"]["train_tokens"] = right + 1
    with pytest.raises(ManifestError) as e:
        check_manifest(man, mix_dir)
    assert f"totals.train_tokens: says {right + 1}" in str(e.value) and str(right) in str(e.value)


def test_reader_reads_what_was_packed(built, tmp_path):
    from mix_assets.reader import open_mix

    spec, st, res, man = built
    mix_dir = Path(st.root) / "mix"
    r = open_mix(str(mix_dir), cache_dir=str(tmp_path / "cache"), shuffle_seed=0, split="val")
    assert len(r) == man["splits"]["val"]["samples"] and r.fingerprint == man["fingerprint"]
    flat = np.concatenate([np.fromfile(mix_dir / s["path"], "<u2") for s in man["splits"]["val"]["shards"]])
    L = man["packing"]["sample_len"]
    got = sorted(tuple(r.sample(k).tolist()) for k in range(len(r)))
    assert got == sorted(tuple(row) for row in flat.reshape(-1, L).tolist())


_SUBPROCESS = """
import sys, json
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from mix_assets_tests.stages.tokens.test_tokens_pipeline import build
spec, st, res, man = build(Path(sys.argv[1]), epochs={"b": 1.5})
print(json.dumps({"fp": man["fingerprint"], "files": [f["sha256"] for f in man["files"]]}))
"""


@pytest.mark.slow
def test_bit_identical_across_thread_counts(tmp_path):
    out = []
    for threads in ("1", "2"):
        env = {**os.environ, "RAYON_NUM_THREADS": threads}
        r = subprocess.run([sys.executable, "-c", _SUBPROCESS, str(tmp_path / threads), str(REPO)],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    assert out[0] == out[1]
    a, b = tmp_path / "1" / "mix", tmp_path / "2" / "mix"
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()


def test_split_older_than_raw_is_named(tmp_path):
    import pyarrow.parquet as pq

    from mix_assets.core import layout

    spec = tiny_spec(tmp_path)
    st = write_upstream(tmp_path, {"a": 200, "b": 200})
    build_validation_split(st, ["a", "b"], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    path = st.local_path(layout.RAW_DOCS.format(source="b"))
    pq.write_table(pq.read_table(path).slice(0, 150), path)  # raw rebuilt smaller after the split
    with pytest.raises(ValueError, match=r"b/documents.parquet: \d+ document\(s\) of the validation split are not"):
        build_token_shards(st, spec)


@pytest.mark.parametrize("kw", [
    dict(epochs={"a": 2.5, "b": 1.3}, packing={"separator": "<|endoftext|>"}),
    dict(epochs={"b": 2.0}, packing={"shifted_targets": True}),
], ids=["fractional-epochs-separator", "epochs-shifted"])
def test_shards_equal_the_per_document_reference(tmp_path, kw):
    """Columnar bookkeeping (Arrow ids, int64/uint64 columns) writes the very bytes the old
    per-document implementation (tokens_reference.py) writes: shards, counts, documents, seams."""
    spec, st, res, man = build(tmp_path, **kw)
    assert as_built(man) == reference_shards(st, spec)


def test_arrow_string_rank_is_python_str_order():
    """Ties in the selection and stream-order hashes are broken by doc_id: Arrow's UTF-8 byte
    sort must agree with Python's code-point comparison, and stay stable on equal ids."""
    import pyarrow as pa

    from mix_assets.stages.tokens.shards import _stable_rank

    ids = ["b", "a", "é", "\uffff", "😀", "a", "Z", "ab", "", "b", "\u00ff", "ÿa"] * 3
    ref = np.empty(len(ids), np.int64)
    ref[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    assert (_stable_rank(pa.array(ids)) == ref).all()


def test_selection_order_ties_fall_back_to_doc_id(monkeypatch):
    import pyarrow as pa

    from mix_assets.stages.tokens import shards
    from mix_assets_tests.oracles.tokens_reference import ref_selection_order

    ids = [f"doc-{i:03d}-é" if i % 7 else f"doc-{i}" for i in np.random.default_rng(1).permutation(200)]
    assert shards._selection_order(11, pa.array(ids)).tolist() == ref_selection_order(11, ids)
    coarse = lambda seed, key: float(len(key) % 3) / 4  # noqa: E731  (forces equal hashes)
    monkeypatch.setattr(shards, "unit_hash", coarse)
    u = [coarse(11, f"sel:{d}") for d in ids]
    assert shards._selection_order(11, pa.array(ids)).tolist() == ref_selection_order(11, ids, u)


_KILLED_MID_PACK = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from mix_assets.stages.tokens import shards
from mix_assets.core.storage import Storage
from mix_assets_tests.support.tokens_spec import tiny_spec
root, real_replace = Path(sys.argv[1]), os.replace
def stuck(src, dst):  # hold the third train shard's temporary file open until killed
    if str(dst).endswith("train-00002.bin"):
        (root / "stuck").write_text("")
        time.sleep(600)
    return real_replace(src, dst)
os.replace = stuck
storage = Storage(str(root), cache_dir=str(root / "cache"))
shards.build_token_shards(storage, tiny_spec(root), scratch_dir=str(root / "cache"))
"""


def test_scratch_of_a_killed_build_is_removed_by_the_next(tmp_path):
    import signal
    import time

    from mix_assets.core import scratch
    from mix_assets.core.storage import Storage

    spec = tiny_spec(tmp_path)
    st = write_upstream(tmp_path, {s.name: 400 for s in spec.sources}, near_dups=10, masked=5)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    cache = tmp_path / "cache"
    cache.mkdir()
    p = subprocess.Popen([sys.executable, "-c", _KILLED_MID_PACK, str(tmp_path), str(REPO)])
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "stuck").exists():
            assert p.poll() is None and time.monotonic() < deadline, "the build did not reach the third shard"
            time.sleep(0.05)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    left = sorted(str(f.relative_to(tmp_path)) for f in tmp_path.rglob("*") if f.is_file())
    assert any("/spill.bin" in f for f in left) and any(f.endswith(".tmp") for f in left), left

    # an S3 root uploads each shard from a local file in the cache: one a killed build left there
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (cache / f"upload_{scratch.HOST}_{int(dead.stdout)}_k2j4.tmp").write_bytes(b"half a shard")
    build_token_shards(Storage(str(tmp_path), cache_dir=str(cache)), spec, scratch_dir=str(cache))
    assert list(cache.iterdir()) == []
    assert [f for f in tmp_path.rglob("*") if f.name.endswith(".tmp") or f.name == "spill.bin"] == []
