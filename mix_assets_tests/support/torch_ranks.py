"""One rank of a torch.distributed (gloo, CPU) job reading a mix through MixIterableDataset with a 2-worker
DataLoader; the reader tests start W of these as processes (`python -m mix_assets_tests.support.torch_ranks`).

Rank and world size come from torch.distributed, not from arguments. Each step the ranks all_gather their
step number (all must be at the same one) and the rank appends {"rank", "step", "positions", "sha"} as a
JSON line to --out. Rank 0 writes the job state to --ckpt after every --ckpt-every steps; --kill-after N
SIGKILLs the rank after N steps (a job killed mid-epoch: whatever came after the last checkpoint is lost).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from mix_assets.reader.torch_data import MixIterableDataset


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    for name in ("mix", "cache", "store", "out"):
        ap.add_argument(f"--{name}", required=True)
    for name in ("rank", "world", "global-batch", "seed"):
        ap.add_argument(f"--{name}", type=int, required=True)
    ap.add_argument("--state", default=None)
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-every", type=int, default=1)
    ap.add_argument("--kill-after", type=int, default=None)
    a = ap.parse_args(argv)
    dist.init_process_group("gloo", init_method=f"file://{a.store}", rank=a.rank, world_size=a.world)
    state = json.load(open(a.state)) if a.state else None
    ds = MixIterableDataset(a.mix, a.global_batch, state=state, shuffle_seed=a.seed, cache_dir=a.cache)
    ran = 0
    with open(a.out, "a") as out:
        for item in DataLoader(ds, batch_size=None, num_workers=2):
            step = item["step"]
            got = [torch.zeros(1, dtype=torch.int64) for _ in range(a.world)]
            dist.all_gather(got, torch.tensor([step]))
            assert [int(t) for t in got] == [step] * a.world, f"ranks at different steps: {got}"
            sha = hashlib.sha256(item["tokens"].numpy().tobytes()).hexdigest()
            out.write(json.dumps({"rank": dist.get_rank(), "step": step, "positions": item["positions"].tolist(),
                                  "sha": sha}) + "\n")
            out.flush()
            ran += 1
            if a.ckpt and dist.get_rank() == 0 and (step + 1) % a.ckpt_every == 0:
                tmp = a.ckpt + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(ds.state_dict(step + 1), f)
                os.replace(tmp, a.ckpt)
            if a.kill_after is not None and ran >= a.kill_after:
                dist.barrier()  # both ranks get here; then the job dies at once
                os.kill(os.getpid(), signal.SIGKILL)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
