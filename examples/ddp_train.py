"""A data-parallel training loop (torch.distributed, gloo, CPU) on mix_assets.reader.torch_data that checkpoints,
is killed, and resumes on a different number of processes with the same per-step losses.

    python examples/ddp_train.py build/published/mix --world 2 --steps 40 --global-batch 12 \
        --ckpt /tmp/ddp.npz --ckpt-every 10 --kill-after 25    # killed after step 24: steps 20..24 are lost
    python examples/ddp_train.py build/published/mix --world 3 --steps 40 --global-batch 12 \
        --ckpt /tmp/ddp.npz --ckpt-every 10                    # resumes at step 20 on 3 processes

It starts --world processes itself (torch.multiprocessing, a file store for the process group). Each rank
reads its slice of every global batch through MixIterableDataset and a DataLoader with --workers workers.
The model is examples/train_loop.py's count-based bigram model, kept identical on every rank: each rank
scores its slice, the per-token losses are all-gathered in rank order (so the step's loss is computed over
the very array a single process would see), and the rank's bigram counts are all-reduced (integer sums,
exact in float64). So the per-step losses equal those of `train_loop.py` in one process, uninterrupted,
bit for bit, whatever the number of processes and wherever the run was killed. (A gradient-trained model
would match only to rounding: float sums in another order.) Rank 0 prints `step <n> loss <float>` and
writes the checkpoint: the model counts and the job's reader state (`ds.state_dict(step)`), atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_loop import BigramModel, save_checkpoint  # noqa: E402


def _rank(rank: int, a: argparse.Namespace, store: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    from mix_assets.reader.torch_data import MixIterableDataset

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=a.world)
    state, counts = None, None
    if a.ckpt is not None and a.ckpt.exists():
        with np.load(a.ckpt) as z:
            state, counts = json.loads(str(z["reader_state"])), {"pair": z["pair"], "prev": z["prev"]}
    ds = MixIterableDataset(a.location, a.global_batch, state=state, steps=a.steps, shuffle_seed=a.shuffle_seed,
                            cache_dir=a.cache_dir)
    model = BigramModel(int(ds.reader.manifest["tokenizer"]["vocab_size"]))
    if counts is not None:
        model.load(counts)
        if rank == 0:
            print(f"resumed at step {ds.plan.start_step} on {a.world} processes", flush=True)
    ran = 0
    for item in DataLoader(ds, batch_size=None, num_workers=a.workers):
        step, x = item["step"], item["tokens"].numpy()
        a_prev, h = model._keys(x)
        p = (model.pair[h] + model.alpha) / (model.prev[a_prev] + model.alpha * model.vocab_size)
        nll = [torch.empty(len(h), dtype=torch.float64) for _ in range(a.world)]
        dist.all_gather(nll, torch.from_numpy(-np.log(p)))
        loss = float(torch.cat(nll).numpy().mean())  # the mean over the global batch, in its order
        delta = [torch.zeros(model.table, dtype=torch.float64), torch.zeros(model.vocab_size, dtype=torch.float64)]
        np.add.at(delta[0].numpy(), h, 1.0)
        np.add.at(delta[1].numpy(), a_prev, 1.0)
        for d in delta:
            dist.all_reduce(d)
        model.pair += delta[0].numpy()
        model.prev += delta[1].numpy()
        ran += 1
        if rank == 0:
            print(f"step {step} loss {loss!r}", flush=True)
            if a.ckpt is not None and (step + 1) % a.ckpt_every == 0:
                save_checkpoint(a.ckpt, model, ds.state_dict(step + 1))
        if a.kill_after is not None and ran >= a.kill_after:
            dist.barrier()
            os.kill(os.getpid(), signal.SIGKILL)  # the job dies: whatever came after the checkpoint is lost
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("location", help="mix directory, s3://bucket/prefix or hf://datasets/org/name@revision")
    ap.add_argument("--world", type=int, default=2, help="processes (ranks)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers per rank")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=12)
    ap.add_argument("--ckpt", type=Path, default=None, help="checkpoint file (.npz); resumed from when present")
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--kill-after", type=int, default=None, help="SIGKILL every rank after this many steps")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--shuffle-seed", type=int, default=1234)
    a = ap.parse_args(argv)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        try:
            mp.spawn(_rank, args=(a, os.path.join(tmp, "store")), nprocs=a.world)
        except mp.ProcessExitedException as e:
            if a.kill_after is None:
                raise
            print(f"killed ({e})", flush=True)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
