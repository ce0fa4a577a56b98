"""mix_assets.reader.torch_data with the real torch: DataLoader workers, torch.distributed ranks (gloo, CPU, separate
processes), exact and elastic resume. The union over ranks x workers of step s is the reader's batch s."""

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

if os.environ.get("CI") == "true":
    import torch  # CI installs the test extra, which includes torch: these tests must run there
else:
    torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[torch]' (the test extra "
                                                "includes it)")
from torch.utils.data import DataLoader  # noqa: E402

from mix_assets.reader import ResumeMismatchError, open_mix  # noqa: E402
from mix_assets.reader.torch_data import MixIterableDataset, MixMapDataset  # noqa: E402
from mix_assets_tests.support.mixfactory import write_test_mix  # noqa: E402

pytestmark = pytest.mark.torch

REPO = Path(__file__).resolve().parents[2]
SEED = 1234
B = 6  # divisible by 1, 2 and 3 ranks


@pytest.fixture()
def mix(tmp_path: Path) -> Path:
    root = tmp_path / "mix"
    write_test_mix(root, train_shards=(13, 13, 13, 13, 12), val_shards=(4,), seq_len=16, seed=5)
    return root  # 64 train samples: 10 full global batches of 6


def single_batches(root: Path, cache: Path) -> dict[int, np.ndarray]:
    r = open_mix(root, cache_dir=cache, shuffle_seed=SEED)
    return {s: r.batch(s, B).astype(np.int64) for s in range(len(r) // B)}


def sha(x) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def test_dataloader_two_workers_ranks_union_is_the_readers_batch(mix, tmp_path):
    want = single_batches(mix, tmp_path / "c")
    for world in (1, 2, 3):
        per_step: dict[int, list] = {}
        for rank in range(world):
            ds = MixIterableDataset(mix, B, rank=rank, world_size=world, shuffle_seed=SEED, cache_dir=tmp_path / "c")
            items = list(DataLoader(ds, batch_size=None, num_workers=2))
            assert [it["step"] for it in items] == list(range(10)) == list(range(len(ds)))  # in step order
            for it in items:
                assert it["tokens"].shape == (B // world, 16) and it["tokens"].dtype == torch.int64
                per_step.setdefault(it["step"], []).append(it)
        for s, its in per_step.items():  # ranks in rank order: the reader's batch, each sample once
            assert torch.cat([it["positions"] for it in its]).tolist() == list(range(s * B, (s + 1) * B))
            assert (torch.cat([it["tokens"] for it in its]).numpy() == want[s]).all()


def test_workers_with_prefetch_and_shard_windows_over_s3_read_the_readers_batches(mix, tmp_path):
    from mix_assets_tests.support.fakeremotes import FakeS3Client

    kw = {"shuffle_seed": SEED, "shuffle_window": 2, "cache_dir": tmp_path / "c", "cache_bytes": 4 * 13 * 16 * 2}
    s3 = FakeS3Client("bucket", mix.parent, prefix="mix")
    r = open_mix("s3://bucket/mix", s3_client=s3, **kw)
    want = {s: r.batch(s, B).astype(np.int64) for s in range(len(r) // B)}
    for world in (1, 2):
        for rank in range(world):
            ds = MixIterableDataset("s3://bucket/mix", B, rank=rank, world_size=world, prefetch_bytes=2 * 13 * 16 * 2,
                                    s3_client=FakeS3Client("bucket", mix.parent, prefix="mix"), **kw)
            for it in DataLoader(ds, batch_size=None, num_workers=2):
                b = B // world
                assert (it["tokens"].numpy() == want[it["step"]][rank * b:(rank + 1) * b]).all()
            assert ds.state_dict(3)["shuffle_scheme"] == "shard_window"


def test_map_style_with_batch_sampler_and_workers(mix, tmp_path):
    want = single_batches(mix, tmp_path / "c")
    ds = MixMapDataset(mix, shuffle_seed=SEED, cache_dir=tmp_path / "c")
    r = open_mix(mix, cache_dir=tmp_path / "c", shuffle_seed=SEED)
    assert len(ds) == 64 and (ds[5].numpy() == r.sample(5)).all()
    got = {0: [], 1: []}
    for rank in (0, 1):
        sampler = ds.batch_sampler(B, rank=rank, world_size=2)
        got[rank] = [x.numpy() for x in DataLoader(ds, batch_sampler=sampler, num_workers=2)]
        assert len(got[rank]) == len(sampler) == 10
    for s in range(10):
        assert (np.concatenate([got[0][s], got[1][s]]) == want[s]).all()
    assert sampler.state_dict(4) == _reader_after(mix, tmp_path / "c", 4).state_dict()


def _reader_after(root: Path, cache: Path, steps: int):
    r = open_mix(root, cache_dir=cache, shuffle_seed=SEED)
    for s in range(steps):
        r.batch(s, B)
    return r


def test_one_state_per_job_and_elastic_resume_in_process(mix, tmp_path):
    c = tmp_path / "c"
    want = single_batches(mix, c)
    two = [MixIterableDataset(mix, B, rank=k, world_size=2, shuffle_seed=SEED, cache_dir=c) for k in (0, 1)]
    st = two[0].state_dict(4)
    assert st == two[1].state_dict(4) == _reader_after(mix, c, 4).state_dict()  # every rank, and one process
    assert st["samples_consumed"] == 24 and st["step"] == 4
    json.loads(json.dumps(st))
    three = [MixIterableDataset(mix, B, state=st, rank=k, world_size=3, shuffle_seed=SEED, cache_dir=c)
             for k in range(3)]
    items = [list(DataLoader(ds, batch_size=None, num_workers=2)) for ds in three]
    assert [it["step"] for it in items[0]] == list(range(4, 10))
    for j, s in enumerate(range(4, 10)):
        assert (torch.cat([items[k][j]["tokens"] for k in range(3)]).numpy() == want[s]).all()
    # a single-process reader continues from the job's state too
    r = open_mix(mix, cache_dir=c, shuffle_seed=SEED)
    r.load_state_dict(three[2].state_dict(7))
    assert (r.batch(7, B).astype(np.int64) == want[7]).all()


def test_mismatched_state_raises(mix, tmp_path):
    c = tmp_path / "c"
    st = MixIterableDataset(mix, B, shuffle_seed=SEED, cache_dir=c).state_dict(2)
    with pytest.raises(ResumeMismatchError, match="shuffle_seed"):
        MixIterableDataset(mix, B, state=st, shuffle_seed=SEED + 1, cache_dir=c)
    for field, value in (("seq_len", 32), ("shuffle_perm_sha", "0" * 64), ("dataset_files_sha", "1" * 64)):
        with pytest.raises(ResumeMismatchError, match=field):
            MixIterableDataset(mix, B, state={**st, field: value}, shuffle_seed=SEED, cache_dir=c)
    other = tmp_path / "other"
    write_test_mix(other, train_shards=(13, 13, 13, 13, 12), val_shards=(4,), seq_len=16, seed=6)
    with pytest.raises(ResumeMismatchError, match="different dataset"):
        MixIterableDataset(other, B, state=st, shuffle_seed=SEED, cache_dir=c)
    with pytest.raises(ValueError, match="not divisible by world_size 4"):
        MixIterableDataset(mix, B, rank=0, world_size=4, shuffle_seed=SEED, cache_dir=c)


# -- torch.distributed: separate processes, gloo ----------------------------------------------------------
def _start_job(mix: Path, tmp: Path, name: str, world: int, **opts) -> tuple[list, Path, bool]:
    """Start `world` rank processes; _wait_job returns their JSON-line records (killed ranks included)."""
    out = tmp / f"{name}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [f"--{k.replace('_', '-')}={v}" for k, v in opts.items() if v is not None]
    procs = [subprocess.Popen([sys.executable, "-m", "mix_assets_tests.support.torch_ranks", f"--mix={mix}",
                               f"--cache={tmp / 'c'}", f"--store={tmp / (name + '.store')}", f"--out={out}",
                               f"--rank={k}", f"--world={world}", f"--global-batch={B}", f"--seed={SEED}", *args],
                              env=env, stderr=subprocess.PIPE, text=True) for k in range(world)]
    return procs, out, bool(opts.get("kill_after"))


def _wait_job(job: tuple[list, Path, bool]) -> list[dict]:
    procs, out, killed = job
    for p in procs:
        _, err = p.communicate(timeout=180)
        if p.returncode != (-9 if killed else 0):
            pytest.fail(f"rank exited {p.returncode}:\n{err[-3000:]}")
    return [json.loads(line) for line in out.read_text().splitlines()]


def _check_union(records: list[dict], want: dict[int, np.ndarray], world: int, steps: range) -> None:
    by_step: dict[int, dict[int, dict]] = {}
    for rec in records:
        assert rec["rank"] not in by_step.setdefault(rec["step"], {}), "a rank read a step twice"
        by_step[rec["step"]][rec["rank"]] = rec
    assert sorted(by_step) == list(steps)
    b = B // world
    for s, ranks in by_step.items():
        assert sorted(ranks) == list(range(world))
        assert [p for k in range(world) for p in ranks[k]["positions"]] == list(range(s * B, (s + 1) * B))
        assert [ranks[k]["sha"] for k in range(world)] == [sha(want[s][k * b:(k + 1) * b]) for k in range(world)]


@pytest.mark.slow
def test_distributed_ranks_killed_mid_epoch_resume_exactly_and_elastically(mix, tmp_path):
    want = single_batches(mix, tmp_path / "c")
    ckpt = tmp_path / "ckpt.json"
    # 2 ranks x 2 workers; checkpoint every 2 steps; the job is killed after step 4 (step 4's work is lost)
    first = _wait_job(_start_job(mix, tmp_path, "first", 2, ckpt=ckpt, ckpt_every=2, kill_after=5))
    _check_union(first, want, 2, range(0, 5))
    state = json.loads(ckpt.read_text())
    assert (state["step"], state["samples_consumed"]) == (4, 24)
    # from that checkpoint, two jobs at once: on 2 ranks (exact resume) and on 3 (elastic): steps 4..9
    again2 = _start_job(mix, tmp_path, "again2", 2, state=ckpt)
    again3 = _start_job(mix, tmp_path, "again3", 3, state=ckpt)
    _check_union(_wait_job(again2), want, 2, range(4, 10))
    _check_union(_wait_job(again3), want, 3, range(4, 10))


@pytest.mark.slow
def test_example_ddp_loop_killed_and_resumed_on_three_processes_has_single_process_losses(mix, tmp_path):
    spec = importlib.util.spec_from_file_location("train_loop", REPO / "examples" / "train_loop.py")
    train_loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_loop)
    base = train_loop.train(str(mix), steps=10, batch_size=B, cache_dir=str(tmp_path / "c"), quiet=True)
    cmd = [sys.executable, str(REPO / "examples/ddp_train.py"), str(mix), "--steps", "10", "--global-batch",
           str(B), "--workers", "0", "--cache-dir", str(tmp_path / "c"), "--ckpt", str(tmp_path / "ddp.npz"), "--ckpt-every", "2"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*extra: str, code: int) -> dict[int, float]:
        p = subprocess.run(cmd + list(extra), capture_output=True, text=True, env=env, timeout=180)
        assert p.returncode == code, p.stdout + p.stderr[-3000:]
        return {int(ln.split()[1]): float(ln.split()[3]) for ln in p.stdout.splitlines() if ln.startswith("step ")}

    # --workers 0: DataLoader workers under ranks are covered above; here the processes are the cost
    first = run("--world", "2", "--kill-after", "5", code=3)  # killed after step 4; checkpoint at step 4
    second = run("--world", "3", code=0)
    assert sorted(first) == [0, 1, 2, 3, 4] and sorted(second) == [4, 5, 6, 7, 8, 9]
    assert first[4] == second[4]  # step 4 ran twice: killed before its checkpoint, then again
    assert {**first, **second} == base and len(set(base.values())) > 1


def test_doc_ids_on_request_match_the_reader(tmp_path):
    from mix_assets_tests.stages.tokens.test_tokens_pipeline import build

    build(tmp_path, packing={"separator": "<|endoftext|>"})
    loc, kw = str(tmp_path / "mix"), {"cache_dir": str(tmp_path / "cache"), "shuffle_seed": SEED}
    r = open_mix(loc, **kw)
    ds = MixMapDataset(loc, with_doc_ids=True, **kw)
    for k in (0, 5, len(r) - 1):
        item = ds[k]
        assert item["doc_ids"].dtype == torch.int32 and item["doc_ids"].shape == (r.sample_len,)
        assert item["doc_ids"].tolist() == r.segment_ids(k).tolist()
        assert item["tokens"].tolist() == r.sample(k).tolist()
    it = MixIterableDataset(loc, 4, steps=2, rank=0, world_size=1, with_doc_ids=True, **kw)
    for item in DataLoader(it, batch_size=None, num_workers=0):
        want = [r.segment_ids(k).tolist() for k in item["positions"].tolist()]
        assert item["doc_ids"].tolist() == want
    assert isinstance(MixMapDataset(loc, **kw)[0], torch.Tensor)  # off by default: a tensor, as before
