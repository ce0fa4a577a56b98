"""A replay SIMULATION (not a measurement) of the measured map-task durations on many workers.

    PYTHONPATH=$PWD .venv/bin/python bench/replay.py [--costs mix_assets/plan_costs.json] [--tb 1 10 40] [--workers 64 640]

Input: the task durations and per-step serial seconds bench/plan_costs.py measured (recorded in
mix_assets/plan_costs.json, at its largest size). For a corpus of T TB, each map step has its measured
task count x T / measured MB tasks (the chunks are `engine.chunk_rows` documents, so their count grows
with the corpus), the k-th task lasting the k-th measured duration (cyclically, in the measured order).
They are replayed as core/engine.map_chunks runs them on Ray: submitted in chunk order, at most
2 x workers in flight, results taken in submission order (a finished task holds its slot until every
earlier one is taken), each task on the first free worker. A step's wall = its serial seconds (outside
tasks, in the step's process, from the fitted per-MB line) + the replay's makespan. Steps run one after
another. Task counts beyond 200 x workers are replayed at 200 x workers and the makespan scaled
linearly (the steady state of a long queue). Assumes: workers as fast as the bench host's cores were
(loaded, see the costs' `measured`), no scheduling or S3 latency beyond what the tasks measured, and the
reduces as they are in this code (their serial seconds grow with the corpus).
Prints a markdown table (the `## ` section docs/scale.md quotes) and writes it to
bench/results/replay.md (`--results`).
"""

from __future__ import annotations

import argparse
import heapq
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COSTS = REPO / "mix_assets" / "plan_costs.json"
RESULTS = REPO / "bench" / "results" / "replay.md"
CAP = 200  # tasks replayed per worker at most; beyond, the makespan is scaled linearly


def makespan(durations: list[float], n: int, workers: int) -> float:
    """Replay of n tasks (durations cycled) on `workers`, at most 2 x workers in flight, taken in order."""
    if n <= 0 or not durations:
        return 0.0
    m = min(n, CAP * workers)
    window = 2 * workers
    free = [0.0] * workers  # when each worker is next free
    taken: list[float] = []  # when task i's result was taken (in order)
    last = 0.0
    for i in range(m):
        gate = taken[i - window] if i >= window else 0.0  # its slot frees when task i - window is taken
        start = max(heapq.heappop(free), gate)
        end = start + durations[i % len(durations)]
        heapq.heappush(free, end)
        last = max(last, end)
        taken.append(last)
    return taken[-1] * n / m


def simulate(costs: dict, tb: float, workers: int) -> dict:
    sizes = costs["measured"]["sizes"]
    at = max(sizes, key=lambda s: s["mb"])
    durations = costs["task_durations"][str(at["mb"])]
    mb, scale = tb * 1e6, tb * 1e12 / at["bytes"]
    rows = {}
    for step, c in costs["steps"].items():
        serial = c["serial_s"][0] + c["serial_s"][1] * mb
        tasks = durations.get(step, [])
        n = round(len(tasks) * scale)
        rows[step] = {"serial_s": serial, "tasks": n, "map_s": makespan(tasks, n, workers)}
    return rows


def table(costs: dict, tbs: list[float], workers: list[int]) -> str:
    m = costs["measured"]
    at = max(m["sizes"], key=lambda s: s["mb"])
    out = [f"Replay of the task durations measured at {at['mb']} MB ({m['date']}, code {m['code']}; "
           f"`{m['command']}`), a simulation:", "",
           "| corpus | workers | map tasks | map makespan (h) | serial, step processes (h) | whole graph (h) | serial share |",
           "|---|---|---|---|---|---|---|"]
    for tb in tbs:
        for w in workers:
            rows = simulate(costs, tb, w)
            maps = sum(r["map_s"] for r in rows.values())
            serial = sum(r["serial_s"] for r in rows.values())
            out.append(f"| {tb:g} TB | {w} | {sum(r['tasks'] for r in rows.values()):,} | {maps / 3600:,.2f} | "
                       f"{serial / 3600:,.2f} | {(maps + serial) / 3600:,.2f} | {serial / (maps + serial):.0%} |")
    out += ["", "Serial seconds per step (outside map tasks, in the step's process), from the fitted line:", "",
            "| step | s at 1 TB | s at 10 TB | s at 40 TB |", "|---|---|---|---|"]
    per = {tb: simulate(costs, tb, workers[0]) for tb in tbs}
    top = sorted(costs["steps"], key=lambda s: -per[tbs[-1]][s]["serial_s"])
    for s in top:
        if per[tbs[-1]][s]["serial_s"] >= 60:
            out.append(f"| {s} | " + " | ".join(f"{per[tb][s]['serial_s']:,.0f}" for tb in tbs) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--costs", type=Path, default=COSTS)
    ap.add_argument("--tb", type=float, nargs="+", default=[1, 10, 40])
    ap.add_argument("--workers", type=int, nargs="+", default=[64, 640])
    ap.add_argument("--results", type=Path, default=RESULTS)
    a = ap.parse_args()
    text = "# bench/replay.py: measured task durations replayed on many workers (a simulation)\n\n" + table(
        json.loads(a.costs.read_text()), a.tb, a.workers) + "\n"
    a.results.parent.mkdir(parents=True, exist_ok=True)
    a.results.write_text(text)
    print(text)
    print(f"wrote {a.results}")


if __name__ == "__main__":
    main()
