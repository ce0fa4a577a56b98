"""Which samples each rank and worker of one job reads at each global step (StepPlan); no torch needed,
torch_data wraps it."""

from __future__ import annotations

from dataclasses import dataclass

from mix_assets.reader.errors import PositionError


@dataclass(frozen=True)
class StepPlan:
    """Which samples each rank and worker of one job reads at each global step (no torch needed).

    The job resumed at (start_consumed, start_step) of a state. Global step s reads the global batch
    [g, g + B), g = start_consumed + (s - start_step) * B: the single-process reader's batch s. Rank r of
    world_size W reads the contiguous slice [g + r*b, g + (r+1)*b), b = B / W, so the ranks' slices in rank
    order are that batch. Worker w of n (of one rank's DataLoader) serves the steps with
    (s - start_step) % n == w, whole; the DataLoader takes one from each worker in turn, so a rank sees its
    steps in order. Nothing here depends on W or n but the slicing: resume with any of them (elastic).
    """

    start_consumed: int
    start_step: int
    global_batch: int
    rank: int = 0
    world_size: int = 1
    end_step: int | None = None  # exclusive; None: unbounded

    def __post_init__(self) -> None:
        if self.global_batch < 1 or self.world_size < 1:
            raise ValueError(f"global_batch ({self.global_batch}) and world_size ({self.world_size}) must be >= 1")
        if self.global_batch % self.world_size:
            raise ValueError(f"global batch {self.global_batch} is not divisible by world_size {self.world_size}: "
                             f"each rank reads global_batch / world_size samples per step")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in [0, world_size={self.world_size})")

    @property
    def rank_batch(self) -> int:
        return self.global_batch // self.world_size

    def consumed_at(self, step: int) -> int:
        """samples_consumed once the steps before `step` are done."""
        if step < self.start_step:
            raise PositionError(f"step {step} is before this job's resume point (step {self.start_step})")
        return self.start_consumed + (step - self.start_step) * self.global_batch

    def positions(self, step: int) -> range:
        """This rank's train-sample positions at global step `step`."""
        g = self.consumed_at(step) + self.rank * self.rank_batch
        return range(g, g + self.rank_batch)

    def steps(self, worker: int = 0, num_workers: int = 1) -> range:
        """The global steps worker `worker` of `num_workers` serves, in order."""
        if not 0 <= worker < num_workers:
            raise ValueError(f"worker {worker} is not in [0, num_workers={num_workers})")
        stop = self.end_step if self.end_step is not None else 1 << 62
        return range(self.start_step + worker, max(stop, self.start_step + worker), num_workers)
