"""A capacity plan before the run: per step, peak memory per process, scratch disk and wall time.

    python -m mix_assets.plan CONFIG --workers N --worker-memory M [--corpus-bytes B] [--partitions P] [--json]

From per-document and per-MB cost coefficients that `bench/plan_costs.py` measures and records in
mix_assets/plan_costs.json (`--costs` for another file): for a corpus of B bytes (default: the size on
disk of the files the config's sources read) and D = B / bytes-per-document documents,
  * driver peak (the step's own process) = base + bytes per document x D; for the reduce steps
    (REDUCES) the per-document part is held per partition, so one partition's process needs
    base + bytes per document x D / P: the plan REFUSES (exit 3) when that does not fit M and names
    the smallest partition count that does; a map task's worker peak is bounded by `engine.chunk_rows`,
    not the corpus (measured at the bench's sizes): when it alone does not fit M no partition count
    helps and the plan says to lower engine.chunk_rows;
  * wall = serial seconds (outside tasks, the step's process) + summed map-task seconds / N workers;
  * scratch disk = what the step writes (its lineage outputs) + the run's chunk parts, object store and
    local cache, per MB.
Every figure is linear in B and D and measured on the bench's host: a plan for another machine scales
its seconds by that machine's speed. The coefficients say when, where and with which command they were
measured (the `measured` block, printed with the plan).
Exit status: 0 the plan fits; 3 refused (message on stderr); 2 bad arguments or unreadable config.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from mix_assets.config import load_spec

COSTS = Path(__file__).with_name("plan_costs.json")
# Steps whose process holds per-document columns (issue 29 §1: partitioned by a hash of the doc or
# cluster id); their per-document memory divides by the partition count.
REDUCES = ("dedup_keys", "exclusion_masks", "validation_split", "token_shards")
EXIT_OK, EXIT_ERROR, EXIT_REFUSED = 0, 2, 3
_UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
          "KI": 2**10, "KIB": 2**10, "MI": 2**20, "MIB": 2**20, "GI": 2**30, "GIB": 2**30, "TI": 2**40, "TIB": 2**40}


class PlanError(ValueError):
    """Bad input to the plan (a size that does not parse, sources that cannot be sized)."""


def parse_bytes(text: str) -> int:
    """'16G', '512MB', '1.5TB', '2GiB' or a plain number of bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise PlanError(f"{text!r}: expected a size such as 16G, 512MB, 1.5TB or a number of bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def load_costs(path: Path = COSTS) -> dict:
    try:
        costs = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise PlanError(f"{path}: cannot read the cost coefficients ({e}); bench/plan_costs.py writes them") from e
    if costs.get("format") != "mix_assets.plan_costs/1" or not costs.get("steps"):
        raise PlanError(f"{path}: not a plan_costs file (format {costs.get('format')!r})")
    return costs


def source_bytes(spec) -> int:
    """Bytes on disk of every file the config's sources read (hub sources cannot be sized here)."""
    total, missing = 0, []
    for src in spec.sources:
        loader = src.loader
        if loader.kind == "hub":
            raise PlanError(f"source {src.name}: a hub dataset is not sized here; pass --corpus-bytes")
        files = []
        for p in loader.paths:
            path = spec.resolve(p)
            hits = sorted(glob.glob(path)) or ([path] if os.path.exists(path) else [])
            for h in hits:
                files += [os.path.join(d, f) for d, _, fs in os.walk(h) for f in fs] if os.path.isdir(h) else [h]
        if not files:
            missing.append(f"{src.name} ({', '.join(loader.paths)})")
        total += sum(os.path.getsize(f) for f in files)
    if missing:
        raise PlanError(f"no files found for source(s) {'; '.join(missing)}; pass --corpus-bytes")
    return total


@dataclass
class StepEstimate:
    step: str
    map: bool
    reduce: bool
    driver_mb: float  # the step's own process (the driver): peak RSS, at 1 partition
    partition_mb: Optional[float]  # reduces: one partition's process at the plan's partition count
    worker_mb: Optional[float]  # map steps: one task's worker process
    wall_s: float
    disk_mb: float


@dataclass
class Plan:
    corpus_bytes: int
    documents: int
    workers: int
    partitions: int
    worker_memory: Optional[int]
    steps: list[StepEstimate]
    scratch_mb: float  # chunk parts, object store, local cache for the whole run
    wall_s: float  # steps one after another (the in-process executor)
    problems: list[str] = field(default_factory=list)
    suggested_partitions: Optional[int] = None

    @property
    def fits(self) -> bool:
        return not self.problems


def _lin(coef, x: float) -> float:
    return coef[0] + coef[1] * x


def estimate(costs: dict, corpus_bytes: int, workers: int, partitions: int = 1,
             worker_memory: Optional[int] = None, docs: Optional[int] = None) -> Plan:
    """The plan for `corpus_bytes` (and `docs`, default from the costs' bytes per document)."""
    if workers < 1 or partitions < 1:
        raise PlanError("workers and partitions must be at least 1")
    mb = corpus_bytes / 1e6
    d = docs if docs is not None else int(round(corpus_bytes / costs["bytes_per_doc"]))
    steps, problems, need = [], [], partitions
    mem = worker_memory / 1e6 if worker_memory else None
    for name, c in costs["steps"].items():
        base, per_doc = c["driver_mb"]
        driver = base + per_doc * d / 1e6
        part = base + per_doc * d / partitions / 1e6 if name in REDUCES else None
        wall = _lin(c["serial_s"], mb) + _lin(c["task_s"], mb) / workers
        steps.append(StepEstimate(name, bool(c["map"]), name in REDUCES, round(driver, 1),
                                  None if part is None else round(part, 1), c.get("worker_mb"),
                                  round(wall, 2), round(max(0.0, _lin(c["disk_mb"], mb)), 2)))
        if mem is None:
            continue
        if part is not None and part > mem:
            if base >= mem:
                problems.append(f"{name}: its process needs {base:,.0f} MB before any document; workers have "
                                f"{mem:,.0f} MB: no partition count fits")
            else:
                p = math.ceil(per_doc * d / 1e6 / (mem - base))
                need = max(need, p)
                problems.append(f"{name}: one of {partitions} partition(s) needs {part:,.0f} MB "
                                f"({base:,.0f} MB + {per_doc:,.0f} B x {d / partitions:,.0f} documents); workers "
                                f"have {mem:,.0f} MB: {p} partitions fit")
        if c.get("worker_mb") and c["worker_mb"] > mem:
            problems.append(f"{name}: a map task's worker needs {c['worker_mb']:,.0f} MB (bounded by "
                            f"engine.chunk_rows = {costs.get('chunk_rows')}, not by the corpus); workers have "
                            f"{mem:,.0f} MB: lower engine.chunk_rows or give workers more memory")
    scratch = sum(max(0.0, _lin(v, mb)) for v in costs.get("scratch_mb", {}).values())
    return Plan(corpus_bytes, d, workers, partitions, worker_memory, steps, round(scratch, 1),
                round(sum(s.wall_s for s in steps), 1), problems, need if need > partitions else None)


def render(plan: Plan, costs: dict) -> str:
    m = costs.get("measured", {})
    lines = [f"corpus {plan.corpus_bytes / 1e9:,.3f} GB, ~{plan.documents:,} documents; {plan.workers} worker(s)"
             + (f" of {plan.worker_memory / 1e9:,.2f} GB" if plan.worker_memory else "")
             + f"; {plan.partitions} partition(s)",
             f"coefficients: {m.get('date', '?')}, code {m.get('code', '?')}, {m.get('host', '?')}",
             "", f"{'step':<58} {'driver MB':>10} {'partition MB':>12} {'worker MB':>10} {'wall s':>10} {'disk MB':>10}"]
    for s in plan.steps:
        lines.append(f"{s.step:<58} {s.driver_mb:>10,.0f} {'' if s.partition_mb is None else f'{s.partition_mb:,.0f}':>12} "
                     f"{'' if s.worker_mb is None else f'{s.worker_mb:,.0f}':>10} {s.wall_s:>10,.1f} {s.disk_mb:>10,.1f}")
    big = max(plan.steps, key=lambda s: s.driver_mb)
    lines += ["", f"total wall (steps one after another): {plan.wall_s:,.0f} s; largest driver process "
                  f"{big.driver_mb:,.0f} MB ({big.step}); scratch (parts, object store, cache) {plan.scratch_mb:,.0f} MB; "
                  f"storage written {sum(s.disk_mb for s in plan.steps):,.0f} MB"]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mix_assets.plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="the mix config")
    ap.add_argument("--workers", type=int, required=True, help="worker processes (one CPU each)")
    ap.add_argument("--worker-memory", required=True, help="memory of one worker, e.g. 16G")
    ap.add_argument("--corpus-bytes", help="corpus size, e.g. 1TB (default: the sources' files on disk)")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the reduces (default 1)")
    ap.add_argument("--costs", type=Path, default=COSTS, help="cost coefficients (bench/plan_costs.py)")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    a = ap.parse_args(argv)
    try:
        costs = load_costs(a.costs)
        mem = parse_bytes(a.worker_memory)
        if a.corpus_bytes is not None:
            corpus = parse_bytes(a.corpus_bytes)
        else:
            corpus = source_bytes(load_spec(a.config))
        plan = estimate(costs, corpus, a.workers, a.partitions, mem)
    except (PlanError, OSError, ValueError) as e:
        print(f"plan: {e}", file=sys.stderr)
        return EXIT_ERROR
    if a.json:
        print(json.dumps({**asdict(plan), "fits": plan.fits, "measured": costs.get("measured", {})}, indent=1))
    else:
        print(render(plan, costs))
    if not plan.fits:
        hint = (f" Use --partitions {plan.suggested_partitions} (the smallest count that fits every reduce)."
                if plan.suggested_partitions else "")
        print("plan refused: " + "; ".join(plan.problems) + "." + hint, file=sys.stderr)
        return EXIT_REFUSED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
