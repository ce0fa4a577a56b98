"""PyTorch views of a published mix, for jobs of any number of ranks x DataLoader workers (docs/reader.md).

Only this module imports torch (pip install 'mix_assets[torch]'); mix_assets.reader stays torch-free.

    from mix_assets.reader.torch_data import MixIterableDataset
    ds = MixIterableDataset("s3://bucket/mix", global_batch=256, steps=10_000, state=ckpt.get("data"),
                            shuffle_seed=1234, cache_dir="/scratch/mixcache")  # after init_process_group
    for item in DataLoader(ds, batch_size=None, num_workers=2):
        x = item["tokens"]                  # (256 // world_size, sample_len) int64, global step item["step"]
        ...
        ckpt["data"] = ds.state_dict(item["step"] + 1)    # the same on every rank; rank 0 saves it

Global step s reads the single-process reader's batch s (`MixReader.batch(s, B)` from the same state):
rank r of W gets its contiguous slice r (B / W samples), so concatenating the ranks' tensors in rank
order gives that batch, each sample once; DataLoader worker w of n serves the steps with
(s - start) % n == w (see reader.StepPlan). The job's state is the reader's own state_dict at a step
boundary, the same on every rank: resume it with any world size or worker count and the global sample
sequence goes on unchanged. Rank and world size come from the arguments, else from torch.distributed
when it is initialised, else 0 and 1 (pass the data-parallel rank and size when tensor/pipeline
replicas must read the same data). A state of another dataset, seed, seq_len or permutation raises
ResumeMismatchError as MixReader.load_state_dict does.

Document boundaries: `with_doc_ids=True` adds "doc_ids", per token its document's number within the
sample (int32, see MixReader.segment_ids): `doc_ids[:, :, None] == doc_ids[:, None, :]` AND causal is an
intra-document attention mask. It needs a revision built with packing.doc_index.

Map-style: MixMapDataset(location, ...)[k] is train sample k; `ds.batch_sampler(B, ...)` yields each
step's rank slice for DataLoader(ds, batch_sampler=..., num_workers=n), workers being stateless fetchers.

With `prefetch_bytes=` (an open_mix argument) each worker's reader fetches the shards of that worker's next
steps in a background thread. Each process (rank, worker) opens its own reader from the location and open_mix arguments (a reader is
never pickled or shared across fork), so `s3_client=` objects must be picklable under spawn.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

try:
    import torch
    from torch.utils.data import Dataset, IterableDataset, get_worker_info
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("mix_assets.reader.torch_data needs torch: pip install 'mix_assets[torch]' "
                      "(mix_assets.reader works without it)") from e

from mix_assets.reader.mix import MixReader, open_mix
from mix_assets.reader.plan import StepPlan


def rank_and_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """The arguments when given, else torch.distributed's when initialised, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError(f"pass both rank and world_size or neither (got rank={rank}, world_size={world_size})")
    if rank is not None:
        return int(rank), int(world_size)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _MixSource:
    """A location + open_mix arguments; each process opens its own reader on first use."""

    def __init__(self, location: Any, open_kwargs: dict):
        self.location = location
        self.open_kwargs = open_kwargs
        self._reader: MixReader | None = None
        self._pid = -1

    @property
    def reader(self) -> MixReader:
        if self._reader is None or self._pid != os.getpid():  # first use, or a forked copy of the parent's
            self._reader = open_mix(self.location, **self.open_kwargs)
            self._pid = os.getpid()
        return self._reader

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_reader": None, "_pid": -1}  # each process opens its own

    def _job(self, global_batch: int, state: dict | None, steps: int | None, rank: int | None,
             world_size: int | None) -> StepPlan:
        """The job's plan for this rank from `state` (checked against this mix, seed and permutation)."""
        r = self.reader
        if state is not None:  # checked (and positioned) on a reader of its own: self.reader's cursor stays put
            r = open_mix(self.location, **self.open_kwargs)
            r.load_state_dict(state)
        return r.plan(global_batch, *rank_and_world(rank, world_size), steps=steps)

    def _state_at(self, plan: StepPlan, step: int) -> dict:
        return self.reader.state_at(plan.consumed_at(step), step)  # pure: any reader of this mix and seed


def _tokens(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(x.astype(np.int64))


def _doc_ids(reader: MixReader, positions: range) -> torch.Tensor:
    """(len(positions), sample_len) int32: per token, its document's number within the sample."""
    return torch.from_numpy(np.stack([reader.segment_ids(k) for k in positions]))


class MixIterableDataset(_MixSource, IterableDataset):
    """This rank's slice of every global step, one item per step: {"step", "tokens", "positions"}, plus
    "doc_ids" with `with_doc_ids=True` (a revision with packing.doc_index). Use with
    DataLoader(ds, batch_size=None, num_workers=n); see the module doc."""

    def __init__(self, location: Any, global_batch: int, *, state: dict | None = None, steps: int | None = None,
                 rank: int | None = None, world_size: int | None = None, with_doc_ids: bool = False,
                 **open_kwargs: Any):
        _MixSource.__init__(self, location, open_kwargs)
        self.with_doc_ids = with_doc_ids
        self.plan = self._job(global_batch, state, steps, rank, world_size)

    def __iter__(self) -> Iterator[dict]:
        info = get_worker_info()
        w, n = (info.id, info.num_workers) if info is not None else (0, 1)
        steps, plan = self.plan.steps(w, n), self.plan
        for i, s in enumerate(steps):
            pos = plan.positions(s)
            self.reader.prefetch(plan.positions(t) for t in steps[i:])  # this worker's steps from this one on
            item = {"step": s, "tokens": _tokens(self.reader.samples(pos.start, len(pos))),
                    "positions": torch.arange(pos.start, pos.stop)}
            if self.with_doc_ids:
                item["doc_ids"] = _doc_ids(self.reader, pos)
            yield item

    def __len__(self) -> int:
        """Steps this rank will yield (all workers together); only for a bounded job."""
        if self.plan.end_step is None:
            raise TypeError("an unbounded job (epochs=None and no steps=) has no length")
        return len(self.plan.steps())

    def state_dict(self, step: int) -> dict:
        """The job's state once global steps < `step` are done (MixReader.state_dict format)."""
        return self._state_at(self.plan, step)


class MixMapDataset(_MixSource, Dataset):
    """ds[k] = train sample k (int64 tensor of sample_len tokens), a pure read; with `with_doc_ids=True`
    {"tokens", "doc_ids"} instead. len = samples in the allowed passes. `batch_sampler(...)` gives a job's
    rank slices."""

    def __init__(self, location: Any, with_doc_ids: bool = False, **open_kwargs: Any):
        _MixSource.__init__(self, location, open_kwargs)
        self.with_doc_ids = with_doc_ids

    def __len__(self) -> int:
        r = self.reader
        if r.epochs is None:
            raise TypeError("an unbounded reader (epochs=None) has no length")
        return r.epochs * len(r)

    def __getitem__(self, k: int) -> torch.Tensor | dict:
        x = _tokens(self.reader.sample(int(k)))
        return {"tokens": x, "doc_ids": _doc_ids(self.reader, [int(k)])[0]} if self.with_doc_ids else x

    def batch_sampler(self, global_batch: int, *, state: dict | None = None, steps: int | None = None,
                      rank: int | None = None, world_size: int | None = None) -> StepBatchSampler:
        return StepBatchSampler(self, self._job(global_batch, state, steps, rank, world_size))


class StepBatchSampler:
    """The positions this rank reads at each global step from plan.start_step on, as index lists."""

    def __init__(self, source: _MixSource, plan: StepPlan):
        self.source, self.plan = source, plan

    @property
    def start_step(self) -> int:
        return self.plan.start_step

    def __iter__(self) -> Iterator[list[int]]:
        for s in self.plan.steps():
            yield list(self.plan.positions(s))

    def __len__(self) -> int:
        if self.plan.end_step is None:
            raise TypeError("an unbounded job (epochs=None and no steps=) has no length")
        return len(self.plan.steps())

    def state_dict(self, step: int) -> dict:
        return self.source._state_at(self.plan, step)
