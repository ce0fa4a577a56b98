"""The whole graph, raw -> published revision, against raw `encode_batch_fast` (issue 13 §7).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/graph.py --sizes 100 400
    ... bench/graph.py --quick   # a 1 MB corpus, all four runs, report in bench/out/graph/quick.md

Corpus: ../mix_assets_tests/support/gen_corpus.py (as bench/recall.py uses it), an order-2 word Markov chain over the shared
books (Gutenberg, Sherlock Holmes, Botchan, State of the Union; the fixture's when the shared data
is absent), log-normal lengths (median 330 words), 10 % of the documents with one planted near-copy
at a true 5-word-shingle Jaccard drawn from [0.80, 0.85]; about `--sizes` MB of UTF-8 text spread
(seeded) over four JSONL sources. Seeded, so every run of a size gets the same bytes.

Config: configs/demo.yaml's structure (trained byte-level BPE, vocab 4096 (`--vocab`), 2 MB training sample,
`<|endoftext|>` separator; dedup 5-word shingles, 128 permutations, threshold 0.8; val_fraction 0.02;
headroom 1.25), audited against the five non-test eval splits of ../shared/data/evals configured as
in configs/shared-sample.yaml. Each source's share is its share of the bytes and target_tokens is
set so each raw budget (budget x headroom) is 97 % of the source's estimated tokens: every source
is read whole and ~97 % of it sampled (a budget of 100 % would leave `budget_met` no slack).
Packing: seq_len 512, 1 Mi-token shards (demo's 64 Ki would mean hundreds of files per 100 MB).
No filter cascade by default (issue 13's graph). `--filters` adds configs/demo.yaml's mix-level
`filters:` section as it stands (Gopher quality and repetition, C4, FineWeb, language ID, guard: the
`document_filters` stage, which keeps ~72 % of this corpus's documents, bench/results/filters_stage.md)
with `keep_share: 0.65`, so every source is still read whole (raw samples budget x headroom /
keep_share) and target_tokens is 0.65 of the figure above. `--filters all` adds issue 30's three on top of
that cascade, over the same pool with filter signals (../mix_assets_tests/support/filters_mix.py: a URL on
every row, 3 % on a blocklisted domain and 1 % with a blocklisted substring; a boilerplate line planted in 30 %
of the documents; 10 % word salad mixed in; two more sources, `reference` prose and `junk` salad, the
classifier's positives and negatives): the URL filter, line dedup, a classifier trained in the graph with each
pool source keeping score >= 0.3 and its best fifth as a tier seen twice; keep_share 0.55 (the cascade's 0.65
times the ~0.85 the three keep). The report adds each run's rejections per reason, the lines removed and the
classifier file's sha256.

Workers: `--workers 1 2` × `--engines local ray` (default: all four). A run with n workers sets the
mix spec's `engine:` section to {kind, num_cpus: n} and every other parallelism knob to n as well
(dedup.threads, audit.threads, packing.threads, RAYON_NUM_THREADS), and the run's process tree (its
Ray daemons and workers included, which inherit it) is pinned to n cores with sched_setaffinity when n
is below the machine's count (`--no-pin` turns this off), so "1 worker" computes on one core and
"2 workers" on two: unpinned, Ray ×1 also computes in the run's own process (the driver consumes
and writes while its one Ray worker maps), which a local ×1 run cannot. The encode reference with n
threads is pinned the same way. Each run has its own storage; the files its manifest lists must be the
same bytes in every run (issue 13 §5), and the report says whether they are (all but
review/mix_config.json, which records the threads knobs and so differs; see `outputs`). kind ray
starts a local Ray instance with n CPUs for each map step's process (dagster-ray; under the
in-process executor once for the run), before the step's STEP_START: `ray.init` is in the step's
bracketed wall seconds, not in its STEP_START -> STEP_SUCCESS seconds.

Each measurement runs in a fresh subprocess, in this order:
  gen    = corpus generation and the base config (reported, not compared with anything)
  graph  = per engine × workers × executor: `rebuild_mix` of the real Definitions
           (`build_definitions(spec)`), reconstructed from MIX_CONFIG by `dg.execute_job` on a
           temporary persistent instance, once per `--executor` (default both, in this order):
           MIX_EXECUTOR=in_process, the project's default (what `make run` and the UI's rebuild_mix
           use: every step in the run's process), which gives the whole-graph figure, the per-step
           seconds and the map-stage speed-up; and MIX_EXECUTOR=multiprocess (every step in its own
           process; `--max-concurrent` 1 by default, so a step's seconds are its own and the workers
           are the only parallelism), which gives the per-process peak RSS. Each figure against a
           target says which run it comes from; with one executor every figure comes from it.
           Per-step seconds: STEP_START -> STEP_SUCCESS/STEP_FAILURE timestamps (check steps
           included), and beside them the step's wall time from the executor's launch line to
           its last log line (process start, resource init such as ray.init, teardown); whole
           graph = RUN_START -> RUN_SUCCESS/RUN_FAILURE, so it includes starting a process per
           step (compare "steps summed"). Map stages = the steps whose asset or check takes the
           engine resource (read from the Definitions, not listed here); the 1 vs 2 workers
           speed-up is on their STEP_START -> STEP_SUCCESS seconds, their wall seconds shown too.
  encode = per worker count n: the same text (every document of the JSONL sources, stripped as
           raw/<source> strips it) already in memory, `Tokenizer.encode_batch_fast` in batches of
           1,000 documents with the graph's own trained tokenizer, RAYON_NUM_THREADS=n
Peak RSS per process: a thread in the graph child reads VmHWM (the kernel's peak resident set) of
every descendant process from /proc every 0.5 s (about 10 ms of CPU a sample here, ~2 % of a
core); a process is attributed to the step whose process (the STEP_START event's pid) is its
ancestor, so a Ray map step reports its own process (the Ray driver), its Ray worker processes
(largest, and how many) and Ray's daemons (raylet, GCS, agents) separately. VmHWM only grows, so a
sample is the peak so far: what a process gains in its last 0.5 s before exiting is missed (a
step process outlives its compute by its Dagster events), and shared pages (libraries, a forked
parent's memory) count in each process, as the kernel counts them. CPU s = user + system seconds
of the graph child plus the last-seen /proc CPU time of every descendant (same 0.5 s caveat) / of
the encode loop (getrusage).
Ratio = graph MB/s / encode MB/s over the same corpus MB, the encode with as many threads as the
run has workers, measured right after that (in-process) run: the host's speed drifts between minutes
(the same encode measured 71 s and 96 s at 400 MB in two runs of one evening), so each run is held to
the reference nearest it in time; the encodes at the end of a size are reported too (the graph
tokenises only the documents the budgets need; the encode reference tokenises all of them).
`--repeat K` runs each in-process graph and its encode K times, repetitions outermost (so 1- and
2-worker runs alternate), and holds the targets to the medians; the 1 -> 2 workers speed-up is shown
beside the raw encode's own 1 -> 2 thread speed-up from the encodes right after the same runs (what
the host's two cores gave a pure-Rust loop at that moment). The
memory targets hold for every process but the LSH reduce (the `dedup_keys` step's process), whose
growth is stated per added document between the smallest and the largest size.

Gates are not weakened: a failed blocking check (`val_disjoint_from_train`, `shards_audit_clean`, ...)
stops the run where Dagster stops it, and the table says so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILTERS_KEEP_SHARE = 0.65  # --filters: below the ~0.72 of documents the demo's cascade keeps here
ALL_KEEP_SHARE = 0.55  # --filters all: the cascade's, times the ~0.85 the URL filter and the classifier keep
OUT = REPO / "bench" / "out" / "graph"
RESULTS = REPO / "bench" / "results" / "graph.md"
SOURCES = ("part_a", "part_b", "part_c", "part_d")
TICKS = os.sysconf("SC_CLK_TCK")
# the first event of a step's own execution (multiprocess: the executor's launch; in_process: resources, start)
WALL_START = ("STEP_WORKER_STARTING", "STEP_WORKER_STARTED", "RESOURCE_INIT_STARTED", "STEP_START")
LSH_STEP = "dedup_keys"  # the one step whose memory may grow with the corpus (stated per document)
EXECUTORS = ("in_process", "multiprocess")  # in_process: time figures; multiprocess: per-process memory


def _status(key: str, pid: int | str = "self") -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def peak_rss_mb() -> float:
    return _status("VmHWM") / 1e6


def compiled_package() -> None:
    """Write mix_assets' bytecode (its __pycache__) before any timed child starts: with
    PYTHONDONTWRITEBYTECODE=1 in the environment (as in the sessions that run these benches) no process
    writes it, so every child compiled the package's ~150 modules from source again (~0.3 CPU s each, in
    the run's import of the Definitions), a cost an installed package or a normal checkout pays once."""
    import compileall

    compileall.compile_dir(str(REPO / "mix_assets"), quiet=1)


def cpu_secs() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def command_line(script: str) -> str:
    """The command that ran this bench, as a report prints it (interpreter relative to the repository)."""
    exe = os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO)) else sys.executable
    return ("PYTHONPATH=$PWD MIX_SHARED_DATA=" + os.environ.get("MIX_SHARED_DATA", "") + " "
            + " ".join(shlex.quote(x) for x in [exe, script, *sys.argv[1:]]))


def shared_data() -> Path:
    sys.path.insert(0, str(REPO))
    from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data

    return find_shared_data() or FIXTURE


def eval_tasks(evals: Path) -> list[dict]:
    """configs/shared-sample.yaml's audit tasks (the five non-test eval splits), paths under `evals`; on the
    in-repo fixture (no shared data folder), the fixture's own tasks (its mix.yaml: piqa's validation rows)."""
    import yaml

    from mix_assets_tests.support.shared_data import FIXTURE, FIXTURE_CONFIG, SHARED_SAMPLE

    config = FIXTURE_CONFIG if evals.resolve() == (FIXTURE / "evals").resolve() else SHARED_SAMPLE
    tasks = yaml.safe_load(config.read_text())["audit"]["tasks"]
    for t in tasks:
        t["dataset"]["path"] = str(evals / Path(t["dataset"]["path"]).name)
    return tasks


# -- children ---------------------------------------------------------------------------------
def child_gen(mb: int, folder: Path, seed: int, bpt: float, filters: str = "none", vocab: int = 4096) -> dict:
    import yaml

    from mix_assets_tests.support import gen_corpus as gc

    data = shared_data()
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    t0 = time.perf_counter()
    model = gc.MarkovModel.from_files(books, order=2)
    if filters == "all":
        return gen_filters_all(mb, folder, seed, bpt, vocab, model, data, t0)
    corpus = gc.generate_bytes(model, int(mb * 1e6), seed=seed)
    paths = gc.write_jsonl_sources(corpus, folder / "corpus", SOURCES, seed=seed)
    secs = time.perf_counter() - t0
    nbytes = {s: sum(len(json.loads(line)["text"].strip().encode()) for line in open(p))
              for s, p in paths.items()}
    total = sum(nbytes.values())
    shares = {s: round(nbytes[s] / total, 6) for s in SOURCES[:-1]}
    shares[SOURCES[-1]] = round(1.0 - sum(shares.values()), 6)
    headroom, val, keep = 1.25, 0.02, (FILTERS_KEEP_SHARE if filters == "cascade" else 1.0)
    target = int(0.97 * total / bpt * (1 - val) / headroom * keep)
    cfg = {
        "name": f"graph_bench_{mb}mb",
        "description": "Markov prose, 10 % planted near-copies at Jaccard 0.80-0.85 (bench/graph.py).",
        "target_tokens": target,
        "headroom": headroom,
        "seed": 1234,
        "sources": [{"name": s, "loader": {"kind": "jsonl", "paths": [paths[s]]}, "text_field": "text",
                     "license": "generated (CC0)",
                     "rationale": "Order-2 Markov prose over the shared books, 10 % planted near-copies.",
                     "share": shares[s]} for s in SOURCES],
        **base_sections(bpt, vocab, val, data),
        "storage": {"root": str(folder / "storage"), "cache_dir": str(folder / "cache")},
        "publish": {"url": str(folder / "published")},
    }
    if filters == "cascade":
        cfg["filters"] = {**demo_cascade(), "keep_share": keep}
    (folder / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return {"secs": secs, "docs": len(corpus.texts), "pairs": int(len(corpus.pairs)),
            "j_min": float(corpus.jaccard.min()), "j_max": float(corpus.jaccard.max()),
            "bytes": total, "target_tokens": target, "training_words": int(len(model.stream)),
            "peak_rss_mb": peak_rss_mb()}


def base_sections(bpt: float, vocab: int, val: float, data: Path) -> dict:
    """The config's sections other than the sources, budgets and filters (the docstring's "Config")."""
    return {
        "tokenizer": {"kind": "train", "vocab_size": vocab, "bytes_per_token_fallback": bpt,
                      "train_sample_bytes": 2000000, "special_tokens": ["<|endoftext|>"]},
        "packing": {"seq_len": 512, "shifted_targets": False, "separator": "<|endoftext|>",
                    "shard_tokens": 1 << 20},
        "dedup": {"shingle_words": 5, "num_perm": 128, "threshold": 0.8, "max_loss_share_warn": 0.3},
        "audit": {"ngram": 13, "mask_contaminated": True, "tasks": eval_tasks(data / "evals")},
        "split": {"val_fraction": val},
    }


def demo_cascade() -> dict:
    import yaml

    return yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())["filters"]


def gen_filters_all(mb: int, folder: Path, seed: int, bpt: float, vocab: int, model, data: Path, t0: float) -> dict:
    """--filters all: the filter-signals corpus and config of mix_assets_tests/support/filters_mix.py over the
    bench's base sections, with the demo's cascade; paths made absolute (each run's config is written elsewhere)."""
    import yaml

    from mix_assets_tests.support import filters_mix as fm

    base = {"name": f"graph_bench_{mb}mb_filters_all", "headroom": 1.25, "seed": 1234,
            "description": "Markov prose, 10 % planted near-copies, URL / boilerplate / salad signals (bench/graph.py).",
            **base_sections(bpt, vocab, 0.02, data)}
    # the WARN on a source's share lost to the masks: the cascade (~28 %), the URL lists (4 %), the salad (~9 %)
    base["dedup"]["max_loss_share_warn"] = 0.5
    cfg_path, info = fm.write_mix(folder, model, int(mb * 1e6), seed, base, keep_share=ALL_KEEP_SHARE,
                                  cascade=demo_cascade(), bytes_per_token=bpt)
    secs = time.perf_counter() - t0
    cfg = yaml.safe_load(cfg_path.read_text())
    for src in cfg["sources"]:
        src["loader"]["paths"] = [str(folder / p) for p in src["loader"]["paths"]]
    for lst in cfg["filters"]["url"]["lists"]:
        lst["path"] = str(folder / lst["path"])
    cfg["storage"] = {"root": str(folder / "storage"), "cache_dir": str(folder / "cache")}
    cfg["publish"] = {"url": str(folder / "published")}
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return {"secs": secs, "docs": info["docs"], "pairs": info["pairs"], "j_min": info["j_min"],
            "j_max": info["j_max"], "bytes": info["bytes"], "target_tokens": info["target_tokens"],
            "training_words": int(len(model.stream)), "peak_rss_mb": peak_rss_mb()}


def rebuild_job():
    """`rebuild_mix` of the spec at MIX_CONFIG (module level: the multiprocess executor reconstructs it
    in every step process)."""
    from mix_assets.config import load_spec
    from mix_assets.definitions import build_definitions
    from mix_assets.jobs import REBUILD_JOB

    return build_definitions(load_spec(Path(os.environ["MIX_CONFIG"]))).resolve_job_def(REBUILD_JOB)


class ProcSampler(threading.Thread):
    """Every `interval` s: VmHWM (peak RSS) of every descendant of `root`, by (pid, start time).

    VmHWM only grows, so the last sample of a process is its peak up to that moment; what it gains in
    its last `interval` before exiting is missed. First-seen parent pid is kept (a Ray worker whose
    raylet exits is re-parented to init, but was seen under it before).
    """

    def __init__(self, root: int, interval: float = 0.5):
        super().__init__(daemon=True)
        self.root, self.interval, self.halt = root, interval, threading.Event()
        self.procs: dict[tuple[int, int], dict] = {}
        self.own_cpu: list[tuple[float, float]] = []  # (time.time(), this process's user + system CPU s)

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self.halt.set()
        self.join()
        self.sample()

    def sample(self) -> None:
        t = os.times()
        self.own_cpu.append((time.time(), t.user + t.system))
        parent, start, cpu = {}, {}, {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                parent[int(d)], start[int(d)] = int(fields[1]), int(fields[19])
                cpu[int(d)] = (int(fields[11]) + int(fields[12])) / TICKS
        kids: dict[int, list[int]] = {}
        for pid, ppid in parent.items():
            kids.setdefault(ppid, []).append(pid)
        todo = list(kids.get(self.root, []))
        while todo:
            pid = todo.pop()
            todo += kids.get(pid, [])
            try:
                hwm = _status("VmHWM", pid)
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            p = self.procs.setdefault((pid, start[pid]), {"pid": pid, "ppid": parent[pid], "peak": 0})
            p["peak"], p["cmd"] = max(p["peak"], hwm), cmd.strip() or p.get("cmd", "")
            p["cpu"] = cpu[pid]


def proc_kind(cmd: str) -> str:
    """ray_worker: a process that runs tasks (default_worker.py, renamed ray::IDLE / ray::<task> once
    it runs); ray_system: Ray's daemons (gcs_server, raylet, ray::DashboardAgent, monitors)."""
    name = cmd.split(" ", 1)[0]
    if "default_worker.py" in cmd or (name.startswith("ray::") and not name.endswith("Agent")):
        return "ray_worker"
    if name.startswith("ray::") or "/ray/" in cmd or "raylet" in cmd or "gcs_server" in cmd:
        return "ray_system"
    return "other"


def per_step_rss(procs: dict, step_pids: dict[int, str]) -> tuple[dict, list]:
    """Peak RSS MB by step: its own process, its Ray workers (max, count), other Ray processes (max);
    and the processes attributed to no step (the executor's helpers)."""
    by_pid = {p["pid"]: p for p in procs.values()}
    out: dict[str, dict] = {}
    loose = []
    for p in procs.values():
        step, q, hops = None, p, 0
        while q is not None and hops < 64:  # bounded: a reused pid could close a loop
            if q["pid"] in step_pids:
                step = step_pids[q["pid"]]
                break
            q, hops = by_pid.get(q["ppid"]), hops + 1
        mb = p["peak"] / 1e6
        if step is None:
            loose.append({"cmd": p.get("cmd", "")[:80], "kind": proc_kind(p.get("cmd", "")), "peak_mb": mb})
            continue
        s = out.setdefault(step, {"step_mb": None, "ray_worker_mb": None, "ray_workers": 0, "ray_system_mb": None,
                                  "child_mb": None, "cpu_secs": 0.0})
        s["cpu_secs"] += p.get("cpu", 0.0)
        kind = "step" if p["pid"] in step_pids else proc_kind(p.get("cmd", ""))
        key = {"step": "step_mb", "ray_worker": "ray_worker_mb", "ray_system": "ray_system_mb"}.get(kind, "child_mb")
        s[key] = max(s[key] or 0.0, mb)
        s["ray_workers"] += kind == "ray_worker"
    return out, loose


def map_steps(spec) -> list[str]:
    """Step keys of the assets and checks that take the engine resource (the map stages)."""
    from mix_assets.definitions import build_definitions

    graph = build_definitions(spec).resolve_asset_graph()
    return sorted(a.node_def.name for a in graph.assets_defs if "engine" in a.required_resource_keys)


def child_graph(cfg: Path, max_concurrent: int, executor: str) -> dict:
    import dagster as dg
    import numpy as np

    from mix_assets.config import load_spec

    t0 = time.perf_counter()
    os.environ["MIX_CONFIG"] = str(cfg)
    spec = load_spec(cfg)
    mapped = map_steps(spec)
    (cfg.parent / "dagster_home").mkdir(exist_ok=True)
    instance = dg.DagsterInstance.local_temp(str(cfg.parent / "dagster_home"))
    sampler = ProcSampler(os.getpid())
    sampler.start()
    t1, c1 = time.perf_counter(), cpu_secs()
    conf = {"execution": {"config": {"max_concurrent": max_concurrent}}} if executor == "multiprocess" else {}
    result = dg.execute_job(dg.reconstructable(rebuild_job), instance=instance, raise_on_error=False,
                            run_config=conf)
    t2, c2 = time.perf_counter(), cpu_secs()
    sampler.stop()
    broken = first_step_error(result)
    if broken:  # not a gate: the outputs read below would be missing or stale; report the cause instead
        return {"success": False, "step_error": broken}
    c2 += sum(p.get("cpu", 0.0) for p in sampler.procs.values())
    steps: dict[str, dict] = {}
    step_pids: dict[int, str] = {}
    run_start = run_end = None
    run_resources = []  # resource init/teardown outside any step (in_process: the whole run's, e.g. ray.init)
    for e in instance.all_logs(result.run_id):
        ev = e.dagster_event
        if e.step_key:  # from the executor's "launching" line to the step's last log (resource teardown)
            s = steps.setdefault(e.step_key, {})
            if ev is not None and ev.event_type_value in WALL_START:  # not the run's planned-materialisation events
                s.setdefault("first", e.timestamp)
            if "first" in s:
                s["last"] = e.timestamp
        if ev is None:
            continue
        kind = ev.event_type_value
        if kind.startswith("RESOURCE_INIT") and not e.step_key:
            run_resources.append(e.timestamp)
        if kind in ("RUN_START", "PIPELINE_START"):
            run_start = e.timestamp
        elif kind in ("RUN_SUCCESS", "RUN_FAILURE", "PIPELINE_SUCCESS", "PIPELINE_FAILURE"):
            run_end = e.timestamp
        elif kind == "STEP_START":
            steps.setdefault(ev.step_key, {})["start"] = e.timestamp
            step_pids[ev.pid] = ev.step_key
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED"):
            s = steps.setdefault(ev.step_key, {})
            s["end"], s["status"] = e.timestamp, kind.removeprefix("STEP_").lower()
    # in_process: every step has the run's pid; only the run process and its Ray processes are told apart
    rss, loose = per_step_rss(sampler.procs, step_pids if executor == "multiprocess" else {})
    if executor != "multiprocess":  # the run process's CPU seconds between the step's start and end
        ts, cs = zip(*sampler.own_cpu)
        for k, v in steps.items():
            if {"start", "end"} <= v.keys():
                cpu = np.interp([v["start"], v["end"]], ts, cs)
                rss.setdefault(k, {})["cpu_secs"] = float(cpu[1] - cpu[0])
    order = sorted(steps, key=lambda k: steps[k].get("start", float("inf")))
    step_rows = [{"step": k, "status": steps[k].get("status", "?"), "map": k in mapped,
                  "secs": steps[k]["end"] - steps[k]["start"] if {"start", "end"} <= steps[k].keys()
                  else None, "wall_secs": steps[k]["last"] - steps[k]["first"] if "first" in steps[k] else None,
                  **rss.get(k, {})}
                 for k in order]
    checks = []
    for c in result.get_asset_check_evaluations():
        meta = {k: v.value for k, v in c.metadata.items()}
        checks.append({"check": c.check_name, "asset": c.asset_key.to_user_string(), "passed": c.passed,
                       "severity": c.severity.value, "blocking": bool(getattr(c, "blocking", False)),
                       "meta": {k: meta[k] for k in ("cross_split_near_dup_share", "max_cross_split_jaccard",
                                                     "val_docs") if k in meta}})
    failures = [e.message for e in result.all_events if e.is_failure][:5]
    return {"success": result.success, "run_secs": (run_end - run_start) if run_start and run_end else None,
            "process_secs": t2 - t0, "setup_secs": t1 - t0,
            "run_resource_init_secs": run_resources[-1] - run_resources[0] if len(run_resources) > 1 else None, "cpu_secs": c2 - c1, "steps": step_rows,
            "map_steps": mapped, "checks": checks, "failures": failures,
            "recall": planted_recall(cfg, spec), "shards": shard_stats(spec), "outputs": outputs(spec),
            "peak_rss_mb": peak_rss_mb(), "unattributed": loose,
            "unattributed_ray_worker_mb": max((p["peak_mb"] for p in loose if p["kind"] == "ray_worker"), default=None)}


def first_step_error(result) -> dict | None:
    """The first step that failed with an error (a failed blocking gate is a result, not an error): its
    key and the error's class and message, as the run's event log holds them."""
    for e in result.all_events:
        if e.event_type_value == "STEP_FAILURE" and e.step_failure_data is not None:
            err = e.step_failure_data.error
            if err is not None and err.cls_name != "DagsterAssetCheckFailedError":
                while err.cause is not None and err.cls_name == "DagsterExecutionStepExecutionError":
                    err = err.cause  # the user code's own exception, not Dagster's wrapper
                return {"step": e.step_key, "error": err.message.strip()}
    return None


def _storage(spec):
    from mix_assets.core.storage import Storage

    return Storage(spec.resolve(spec.storage.root))


def planted_recall(cfg: Path, spec) -> dict | None:
    """Planted pairs whose two documents both survived raw sampling: how many share a dedup cluster."""
    import pyarrow.parquet as pq

    from mix_assets.core import layout

    st = _storage(spec)
    kp = Path(st.local_path(layout.DEDUP_KEYS))
    if not kp.exists():
        return None
    doc_at = {}
    for s in SOURCES:
        t = pq.read_table(st.local_path(layout.RAW_DOCS.format(source=s)), columns=["doc_id", "row_index"])
        ids, rows = t.column("doc_id").to_pylist(), t.column("row_index").to_pylist()
        doc_at.update({(s, r): d for d, r in zip(ids, rows)})
    k = pq.read_table(str(kp), columns=["doc_id", "cluster_id"])
    cluster = dict(zip(k.column("doc_id").to_pylist(), k.column("cluster_id").to_pylist()))
    truth = Path(spec.sources[0].loader.paths[0]).parent / "ground_truth.json"
    pairs = json.loads(truth.read_text())["pairs"]
    both = [(doc_at[tuple(p["a"])], doc_at[tuple(p["b"])]) for p in pairs
            if tuple(p["a"]) in doc_at and tuple(p["b"]) in doc_at]
    return {"pairs_both_sampled": len(both), "clustered": sum(cluster[a] == cluster[b] for a, b in both)}


def shard_stats(spec) -> dict | None:
    from mix_assets.core import layout

    p = Path(_storage(spec).local_path(layout.SHARD_STATS))
    if not p.exists():
        return None
    d = json.loads(p.read_text())["splits"]
    return {f"{k} documents": d[k]["documents"] for k in ("train", "val")} | {
        f"{k} tokens": d[k]["emitted_tokens"] for k in ("train", "val")}


def outputs(spec) -> dict:
    """What must not depend on the engine or the worker count: the manifest's files other than
    review/mix_config.json (shards, tokenizer, dedup keys, masks, contamination report), hashed
    together; the fingerprint itself covers mix_config.json too, which holds the `threads` knobs this
    bench varies, so it differs between worker counts by design. Also the documents dedup_keys holds
    (the LSH reduce's bytes per document are stated against it)."""
    import hashlib

    import pyarrow.parquet as pq

    from mix_assets.core import layout

    st = _storage(spec)
    m, k = Path(st.local_path(layout.MANIFEST)), Path(st.local_path(layout.DEDUP_KEYS))
    files = json.loads(m.read_text())["files"] if m.exists() else None
    data = None if files is None else hashlib.sha256("".join(
        f["sha256"] for f in files if f["path"] != "review/mix_config.json").encode()).hexdigest()
    return {"fingerprint": json.loads(m.read_text())["fingerprint"] if m.exists() else None, "data_sha256": data,
            "dedup_docs": pq.ParquetFile(k).metadata.num_rows if k.exists() else None, **filter_outcomes(spec, st)}


def filter_outcomes(spec, st) -> dict:
    """With filters: rejections per reason over every source (the filters' first failing rule); with line dedup:
    lines removed and documents it dropped; with a classifier: its file's sha256 and held-out ROC-AUC."""
    import collections
    import hashlib

    from mix_assets.core import layout
    from mix_assets.stages.filters import decisions

    out: dict = {}
    if spec.filters is not None or any(s.filters for s in spec.sources):
        reasons = collections.Counter(decisions.rejected_ids(st, [s.name for s in spec.sources]).values())
        out["rejections"] = dict(sorted(reasons.items()))
    truth = Path(spec.resolve(spec.sources[0].loader.paths[0])).parent / "ground_truth.json"
    signals = json.loads(truth.read_text()).get("signals") if truth.exists() else None
    if signals and "rejections" in out:  # --filters all: the planted salad vs the prose, by the filter deciding
        import pyarrow.parquet as pq

        by = collections.Counter()
        for s, lines in signals["salad"].items():
            raw = pq.read_table(st.local_path(layout.RAW_DOCS.format(source=s)), columns=["doc_id", "row_index"])
            row = dict(zip(raw.column("doc_id").to_pylist(), raw.column("row_index").to_pylist()))
            salad = set(lines)
            t = decisions.read_decisions(st, [s])[s]
            for d, r in zip(t.column("doc_id").to_pylist(), t.column("reason").to_pylist()):
                by[f"{'salad' if row[d] in salad else 'prose'} {(r or 'kept').split(':')[0]}"] += 1
        out["pool"] = dict(sorted(by.items()))
    if st.exists(layout.LINE_REPORT):
        rep = json.loads(st.read_text(layout.LINE_REPORT))
        out["lines"] = {"frequent": rep["frequent"], "removed_lines": sum(r["removed_lines"] for r in rep["sources"]),
                        "dropped_docs": sum(r["dropped_docs"] for r in rep["sources"])}
    if st.exists(layout.QUALITY_MODEL):
        ts = json.loads(st.read_text(layout.QUALITY_TRAINING_SET))
        out["quality"] = {"model_sha256": hashlib.sha256(st.read_bytes(layout.QUALITY_MODEL)).hexdigest(),
                          "roc_auc": ts["heldout_metrics"].get("roc_auc")}
    return out


def child_encode(cfg: Path) -> dict:
    from tokenizers import Tokenizer

    from mix_assets.config import load_spec
    from mix_assets.core import layout

    spec = load_spec(cfg)
    tok = Path(_storage(spec).local_path(layout.TOKENIZER_FILE))
    if not tok.exists():
        return {"skipped": f"no tokenizer at {tok} (the graph stopped before it)"}
    t = Tokenizer.from_file(str(tok))
    texts = []
    for s in spec.sources:
        for line in open(s.loader.paths[0]):
            texts.append(json.loads(line)["text"].strip())
    nbytes = sum(len(x.encode()) for x in texts)
    n = spec.packing.encode_batch_docs
    t0, c0 = time.perf_counter(), cpu_secs()
    ntok = 0
    for i in range(0, len(texts), n):
        ntok += sum(len(e.ids) for e in t.encode_batch_fast(texts[i : i + n], add_special_tokens=False))
    secs, cpu = time.perf_counter() - t0, cpu_secs() - c0
    out = {"bytes": nbytes, "tokens": ntok, "secs": secs, "cpu_secs": cpu, "peak_rss_mb": peak_rss_mb()}
    # the fast exact backend token_shards uses by default (stages/tokens/backends.py), same texts and threads
    from mix_assets.stages.tokens.backends import encoder_for

    fast = encoder_for(t, "auto")
    threads = int(os.environ.get("RAYON_NUM_THREADS") or 1)
    t0, c0 = time.perf_counter(), cpu_secs()
    ftok = 0
    for i in range(0, len(texts), n):
        ftok += sum(map(len, fast.encode(texts[i : i + n], threads)))
    out["fast"] = {"backend": type(fast).__name__, "secs": time.perf_counter() - t0, "cpu_secs": cpu_secs() - c0,
                   "same_token_count": ftok == ntok}
    return out


def child(kind: str, args: list[str]) -> None:
    if kind == "gen":
        out = child_gen(int(args[0]), Path(args[1]), int(args[2]), float(args[3]), args[4], int(args[5]))
    elif kind == "graph":
        out = child_graph(Path(args[0]), int(args[1]), args[2])
    else:
        out = child_encode(Path(args[0]))
    print("BENCH-RESULT " + json.dumps(out, default=str))


def pinned_cores(threads: int, pin: bool) -> set[int] | None:
    """The first `threads` cores this process may run on, or None when pinning would change nothing."""
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[:threads]) if pin and threads < len(allowed) else None


def run_child(kind: str, args: list, threads: int, log: Path, executor: str = "in_process",
              cores: set[int] | None = None) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "MIX_EXECUTOR": executor,
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, __file__, "--child", kind, *map(str, args)], env=env,
                           stdout=subprocess.PIPE, stderr=fh, text=True,
                           preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
    wall = time.perf_counter() - t0
    lines = [x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if r.returncode or not lines:
        raise SystemExit(f"{kind} child failed (exit {r.returncode}); log: {log}\n{r.stdout[-2000:]}")
    out = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    if out.get("step_error"):
        e = out["step_error"]
        raise SystemExit(f"{kind} child: step {e['step']} failed; stopping here (log: {log})\n{e['error'][-3000:]}")
    out["wall_secs"] = wall
    out["cores"] = sorted(cores) if cores else None
    return out


def run_spec(base: Path, engine: str, workers: int, folder: Path) -> Path:
    """The corpus's mix.yaml with `workers` everywhere a stage has a parallelism knob (engine.num_cpus,
    dedup/audit/packing threads) and its own storage, cache and publish folders."""
    import yaml

    cfg = yaml.safe_load(base.read_text())
    cfg["engine"] = {"kind": engine, "num_cpus": workers}
    for section in ("dedup", "audit", "packing"):
        cfg[section]["threads"] = workers
    cfg["storage"] = {"root": str(folder / "storage"), "cache_dir": str(folder / "cache")}
    cfg["publish"] = {"url": str(folder / "published")}
    folder.mkdir(parents=True)
    (folder / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return folder / "mix.yaml"


# -- report -----------------------------------------------------------------------------------
def f(x, fmt=".1f") -> str:
    return "—" if x is None else format(x, fmt)


def _cores(child: dict) -> str:
    return f"; pinned to core(s) {', '.join(map(str, child['cores']))}" if child.get("cores") else ""


def _gate(c: dict) -> str:
    meta = ", ".join(f"{k} {v}" for k, v in c["meta"].items())
    return f"`{c['check']}` {'passed' if c['passed'] else 'FAILED'}" + (f" ({meta})" if meta else "")


def label(run: dict) -> str:
    return f"{run['engine']} ×{run['workers']} {run.get('executor', 'multiprocess')}" + (
        f" #{run['rep']}" if run.get("rep") else "")


def _figures(xs: list[float], fmt: str = ".2f") -> str:
    """One figure, or each repetition's and their median."""
    if len(xs) == 1:
        return format(xs[0], fmt)
    return ", ".join(format(x, fmt) for x in xs) + f" → median {statistics.median(xs):{fmt}}"


def pick(runs: list[dict], executor: str) -> list[dict]:
    """The runs of `executor` if there are any, else all (with one executor, every figure comes from it)."""
    return [r for r in runs if r.get("executor", "multiprocess") == executor] or runs


def _mb_s(mb: float, secs) -> float | None:
    return mb / secs if secs else None


def _max_step(graph: dict, key: str) -> tuple[float | None, str]:
    vals = [(s[key], s["step"]) for s in graph["steps"] if s.get(key) is not None]
    return max(vals) if vals else (None, "—")


def ray_worker_peak(graph: dict) -> float | None:
    vals = [x for x in (_max_step(graph, "ray_worker_mb")[0], graph.get("unattributed_ray_worker_mb")) if x]
    return max(vals) if vals else None


def map_secs(graph: dict) -> float | None:
    """Wall seconds of the map stages (union of their steps' intervals == their sum when steps run one
    at a time, the default --max-concurrent 1)."""
    secs = [s["secs"] for s in graph["steps"] if s.get("map")]
    return sum(secs) if secs and None not in secs else None


def map_wall_secs(graph: dict) -> float | None:
    """The map steps from the executor launching them to their last log line (process start, Ray
    connect and disconnect included)."""
    secs = [s.get("wall_secs") for s in graph["steps"] if s.get("map")]
    return sum(secs) if secs and None not in secs else None


def section(mb: int, gen: dict, runs: list[dict], encs: dict) -> str:
    corpus_mb = gen["bytes"] / 1e6
    L = [f"### {mb} MB corpus ({corpus_mb:.1f} MB text, {gen['docs']:,} documents, {gen['pairs']:,} planted "
         f"near-copy pairs at true Jaccard {gen['j_min']:.3f}-{gen['j_max']:.3f})", "",
         "| engine × workers | graph result | whole graph s | steps summed s | graph MB/s | raw encode MB/s (same threads) | "
         "**graph ÷ raw encode** (target ≥ 0.7) | same, on CPU s | map stages s (with process start and "
         "resources) | largest step process "
         "peak RSS MB (step) | largest Ray worker peak RSS MB | manifest files but config, sha256 |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        g, enc = run["graph"], run.get("enc") or encs.get(run["workers"], {})
        g_mbps, e_mbps = _mb_s(corpus_mb, g.get("run_secs")), _mb_s(corpus_mb, enc.get("secs"))
        ratio = g_mbps / e_mbps if g_mbps and e_mbps else None
        cpu_ratio = enc["cpu_secs"] / g["cpu_secs"] if enc.get("cpu_secs") and g.get("cpu_secs") else None
        top, top_step = _max_step(g, "step_mb")
        ray_top = ray_worker_peak(g)
        summed = sum(x["secs"] or 0 for x in g["steps"])
        fp = (g["outputs"].get("data_sha256") or "—")[:12]
        L.append(f"| {label(run)} | {'published' if g['success'] else 'FAILED'} | {f(g.get('run_secs'))} | "
                 f"{f(summed)} | "
                 f"{f(g_mbps, '.2f')} | {f(e_mbps, '.2f')} | **{f(ratio, '.2f')}** | {f(cpu_ratio, '.2f')} | "
                 f"{f(map_secs(g))} ({f(map_wall_secs(g))}) | {f(top, '.0f')} (`{top_step}`) | {f(ray_top, '.0f')} | "
                 f"`{fp}` |")
    L.append("")
    for n, enc in sorted(encs.items()):
        if "skipped" in enc:
            L.append(f"Raw encode with {n} thread(s) skipped: {enc['skipped']}.")
        else:
            L.append(f"Raw encode, {n} thread(s): {enc['secs']:.1f} s, {enc['cpu_secs']:.0f} CPU s, "
                     f"{enc['tokens']:,} tokens ({enc['bytes'] / enc['tokens']:.2f} B/token), peak RSS "
                     f"{enc['peak_rss_mb']:.0f} MB{_cores(enc)} (at the end of this size's runs).")
            if enc.get("fast"):
                fe = enc["fast"]
                L.append(f"Raw encode with the fast backend ({fe['backend']}), {n} thread(s), same texts: "
                         f"{fe['secs']:.1f} s, {fe['cpu_secs']:.0f} CPU s, {corpus_mb / fe['secs']:.2f} MB/s "
                         f"(same token count as HF: {fe['same_token_count']}).")
    for run in runs:
        if run.get("enc", {}).get("secs"):
            e = run["enc"]
            L.append(f"Raw encode right after {label(run)} (its reference above): {e['secs']:.1f} s, "
                     f"{e['cpu_secs']:.0f} CPU s, {corpus_mb / e['secs']:.2f} MB/s.")
            if e.get("fast") and run["graph"].get("run_secs"):
                fe = e["fast"]
                L.append(f"  and with the fast backend ({fe['backend']}): {fe['secs']:.1f} s, "
                         f"{corpus_mb / fe['secs']:.2f} MB/s; **graph ÷ raw fast encode "
                         f"{fe['secs'] / run['graph']['run_secs']:.2f}** (wall), "
                         f"{fe['cpu_secs'] / run['graph']['cpu_secs']:.2f} (CPU s).")
    first = runs[0]["graph"]
    L.append(f"Corpus generation {gen['secs']:.1f} s in its own process (peak RSS {gen['peak_rss_mb']:.0f} MB, "
             f"not part of the graph); target_tokens {gen['target_tokens']:,}.")
    if first.get("shards"):
        L[-1] += " Shards hold: " + ", ".join(f"{k} {v:,}" for k, v in first["shards"].items()) + "."
    for run in runs:
        r = run["graph"].get("recall")
        if r:
            L.append(f"{label(run)}: planted pairs with both documents sampled {r['clustered']:,}/"
                     f"{r['pairs_both_sampled']:,} in one dedup cluster; run process peak RSS "
                     f"{run['graph']['peak_rss_mb']:.0f} MB; "
                     f"{run['graph']['setup_secs']:.1f} s before the run started{_cores(run['graph'])}"
                     + (f"; run-level resource init {run['graph']['run_resource_init_secs']:.1f} s (the in-process "
                        "executor connects the engine once per run)" if run["graph"].get("run_resource_init_secs")
                        else "") + ".")
    for run in runs:
        o = run["graph"].get("outputs", {})
        if o.get("rejections") is not None:
            line = f"{label(run)}: documents rejected per reason " + ", ".join(
                f"`{k}` {v:,}" for k, v in o["rejections"].items())
            if o.get("lines"):
                line += (f"; line dedup: {o['lines']['frequent']:,} frequent line(s), {o['lines']['removed_lines']:,} "
                         f"lines removed, {o['lines']['dropped_docs']:,} documents dropped")
            if o.get("quality"):
                line += (f"; classifier held-out ROC-AUC {o['quality']['roc_auc']:.4f}, model sha256 "
                         f"`{o['quality']['model_sha256'][:12]}`")
            if o.get("pool"):
                line += ("; the pool's documents (word salad planted / prose) by the filter that rejected them "
                         "(url first, then the cascade, language, the classifier): " + ", ".join(
                             f"{k} {v:,}" for k, v in o["pool"].items()))
            L.append(line + ".")
    models = {r["graph"].get("outputs", {}).get("quality", {}).get("model_sha256") for r in runs} - {None}
    if models:
        L.append("Classifier file (quality/model.bin): " + ("the same bytes in every run." if len(models) == 1
                                                            else f"DIFFERS between runs: {sorted(models)}"))
    L += ["", "Per step: seconds STEP_START → STEP_SUCCESS (in brackets: from the executor launching the step to "
          "its last log line, so with process start and resource init/teardown such as ray.init), CPU seconds (in "
          "process: the run process's between the step's start and end, from 0.5 s samples, Ray workers' not counted; multiprocess: the "
          "step's processes') / peak RSS MB "
          "of the step's process (+ the number of its Ray worker processes, "
          "the largest one's peak, and the largest of Ray's daemons: raylet, GCS, agents; any other child "
          "process of the step; map stages marked *). In-process runs have one process, so no per-step peak "
          "RSS (—): memory comes from the multiprocess runs, times from the in-process ones.", "",
          "| step (Dagster step key) | " + " | ".join(label(r) for r in runs) + " |",
          "|---|" + "---|" * len(runs)]
    keys = [s["step"] for s in first["steps"]]
    for r in runs[1:]:
        keys += [s["step"] for s in r["graph"]["steps"] if s["step"] not in keys]
    for k in keys:
        cells, is_map = [], False
        for r in runs:
            s = next((x for x in r["graph"]["steps"] if x["step"] == k), None)
            if s is None:
                cells.append("—")
                continue
            is_map |= bool(s.get("map"))
            cell = f"{f(s['secs'])} s ({f(s.get('wall_secs'))}), {f(s.get('cpu_secs'))} CPU s / {f(s.get('step_mb'), '.0f')}"
            if s.get("ray_workers") or s.get("ray_system_mb"):
                cell += (f" (+{s['ray_workers']} workers ≤ {f(s.get('ray_worker_mb'), '.0f')}, Ray daemons ≤ "
                         f"{f(s.get('ray_system_mb'), '.0f')})")
            if s.get("child_mb"):
                cell += f" (other child processes ≤ {s['child_mb']:.0f})"
            cells.append(cell if s["status"] == "success" else f"{cell} {s['status']}")
        L.append(f"| `{k}`{' *' if is_map else ''} | " + " | ".join(cells) + " |")
    L.append("")
    for run in runs:
        g = run["graph"]
        bad = [c for c in g["checks"] if not c["passed"]]
        gates = [c for c in g["checks"] if c["check"] in ("val_disjoint_from_train", "shards_audit_clean")]
        L.append(f"{label(run)} gates: " + ("; ".join(_gate(c) for c in gates) or "none evaluated")
                 + f". Checks evaluated: {len(g['checks'])}, failed: "
                 + (", ".join(f"`{c['check']}` on {c['asset']} ({c['severity']})" for c in bad) or "none") + ".")
        if g["failures"]:
            L.append("Run failures: " + " | ".join(x.replace("\n", " ")[:300] for x in g["failures"]))
    return "\n".join(L) + "\n"


def targets(results: dict[int, dict]) -> list[str]:
    """Each figure beside issue 13's reference, as a ratio (>= 1 meets a floor, <= 1 meets a cap): times
    from the in-process executor's runs, memory from the multiprocess ones (each line names its run)."""
    L = []
    sizes = sorted(results)
    for mb in sizes:
        res = results[mb]
        corpus_mb = res["gen"]["bytes"] / 1e6
        timed: dict[tuple, list[dict]] = {}
        for r in pick(res["runs"], "in_process"):
            timed.setdefault((r["engine"], r["workers"]), []).append(r)
        sized = {(r["engine"], r["workers"]): r for r in pick(res["runs"], "multiprocess")}
        for (eng, n), reps in timed.items():
            pairs = [(r["graph"]["run_secs"], (r.get("enc") or res["encs"].get(n, {})).get("secs")) for r in reps]
            pairs = [(g, e) for g, e in pairs if g and e]
            if n != 2 or not pairs:
                continue
            ratios = [e / g for g, e in pairs]  # (MB / graph s) ÷ (MB / encode s)
            run, ratio = reps[0], statistics.median(ratios)
            each = (f"whole graph {corpus_mb / pairs[0][0]:.2f} MB/s ÷ raw encode {corpus_mb / pairs[0][1]:.2f} MB/s"
                    if len(pairs) == 1 else f"whole graph ÷ raw encode (each measured right after its graph) in "
                    f"{len(pairs)} interleaved pairs: graph {_figures([g for g, _ in pairs], '.1f')} s, encode "
                    f"{_figures([e for _, e in pairs], '.1f')} s, ratios")
            L.append(f"{mb} MB, {eng} ×{n} {run.get('executor', 'multiprocess')}: {each} = {_figures(ratios)} vs "
                     f"target 0.70 → {ratio / 0.7:.2f}× the target ({'met' if ratio >= 0.7 else 'NOT met'})")
        for run in sized.values():
            g = run["graph"]
            top, step = _max_step(g, "step_mb")
            worker, daemon = ray_worker_peak(g), _max_step(g, "ray_system_mb")[0]
            helpers = max((p["peak_mb"] for p in g.get("unattributed", [])), default=None)
            peak = max(x for x in (top, worker, daemon, _max_step(g, "child_mb")[0], helpers, g.get("peak_rss_mb"))
                       if x is not None)
            L.append(f"{mb} MB, {label(run)}: largest per-process peak RSS {peak:.0f} MB (step `{step}` "
                     f"{f(top, '.0f')}, Ray worker {f(worker, '.0f')}, Ray daemon {f(daemon, '.0f')}, processes of no "
                     f"step {f(helpers, '.0f')}, run process {g['peak_rss_mb']:.0f}) vs cap "
                     f"1500 MB → {peak / 1500:.2f} of the cap ({'met' if peak <= 1500 else 'NOT met'})")
        for eng in sorted({e for e, _ in timed}):
            L += speedups(mb, eng, timed.get((eng, 1), []), timed.get((eng, 2), []))
        data = {r["graph"]["outputs"].get("data_sha256") for r in res["runs"]}
        fps = {r["graph"]["outputs"].get("fingerprint") for r in res["runs"]}
        L.append(f"{mb} MB: the manifest's files but mix_config.json (shards, tokenizer, review files) "
                 + ("identical in every run" if len(data) == 1 and None not in data
                    else f"DIFFER between runs: {sorted(str(x)[:12] for x in data)}")
                 + "; full fingerprints (threads and engine are not in mix_config.json, so these must agree too): "
                 + ", ".join(f"{label(r)} `{str(r['graph']['outputs'].get('fingerprint'))[:12]}`" for r in res["runs"])
                 + (" — identical" if len(fps) == 1 else " — DIFFER"))
    if len(sizes) >= 2:
        lo, hi = results[sizes[0]], results[sizes[-1]]
        for r_hi in pick(hi["runs"], "multiprocess"):
            r_lo = next((r for r in pick(lo["runs"], "multiprocess")
                         if (r["engine"], r["workers"]) == (r_hi["engine"], r_hi["workers"])), None)
            if r_lo is None:
                continue
            L += growth(sizes[0], sizes[-1], r_lo, r_hi)
    return L


def speedups(mb: int, eng: str, ones: list[dict], twos: list[dict]) -> list[str]:
    """1 -> 2 workers on the map stages, per repetition (1- and 2-worker runs of one repetition were run
    back to back), beside the raw encode's own 1 -> 2 thread speed-up measured right after each of those
    runs: the most two cores of this host gave a pure-Rust CPU loop at that moment."""
    sp, walls, enc = [], [], []
    for one, two in zip(ones, twos):
        g1, g2 = one["graph"], two["graph"]
        if not (map_secs(g1) and map_secs(g2)):
            continue
        sp.append(map_secs(g1) / map_secs(g2))
        if map_wall_secs(g1) and map_wall_secs(g2):
            walls.append(map_wall_secs(g1) / map_wall_secs(g2))
        e1, e2 = one.get("enc", {}).get("secs"), two.get("enc", {}).get("secs")
        if e1 and e2:
            enc.append(e1 / e2)
    if not sp:
        return []
    s = statistics.median(sp)
    secs = (f"{map_secs(ones[0]['graph']):.1f} s with 1 worker ÷ {map_secs(twos[0]['graph']):.1f} s with 2 = "
            if len(sp) == 1 else f"in {len(sp)} interleaved repetitions ")
    line = (f"{mb} MB, {eng} ({ones[0].get('executor', 'multiprocess')} runs): map stages 1 → 2 workers {secs}"
            f"{_figures(sp)}× vs target 1.6× → {s / 1.6:.2f}× the target ({'met' if s >= 1.6 else 'NOT met'})")
    if walls:
        line += f"; with process start and resources {_figures(walls)}×"
    if enc:
        e = statistics.median(enc)
        line += (f"; the raw encode's own 1 → 2 thread speed-up right after the same runs {_figures(enc)}× "
                 f"(what two cores of this host gave a pure-Rust loop then): the map stages reach {s / e:.2f} of it")
    # issue 29: the whole graph, RUN_START -> RUN_SUCCESS, not only the map stages; CPU s beside it (a loaded
    # host stretches wall seconds, the CPU seconds say how much more work the 2-worker run did)
    whole = [(o["graph"]["run_secs"], t["graph"]["run_secs"], o["graph"].get("cpu_secs"), t["graph"].get("cpu_secs"))
             for o, t in zip(ones, twos) if o["graph"].get("run_secs") and t["graph"].get("run_secs")]
    if not whole:
        return [line]
    w = statistics.median(a / b for a, b, _, _ in whole)
    cpu = [d / c for _, _, c, d in whole if c and d]
    return [line, f"{mb} MB, {eng}: whole graph 1 → 2 workers {whole[0][0]:.1f} s ÷ {whole[0][1]:.1f} s"
                  + (f" (median of {len(whole)})" if len(whole) > 1 else "")
                  + f" = {w:.2f}× vs target 1.7× → {w / 1.7:.2f}× the target ({'met' if w >= 1.7 else 'NOT met'})"
                  + (f"; CPU s 2 workers ÷ 1 worker {_figures(cpu)}" if cpu else "")]


def growth(mb_lo: int, mb_hi: int, r_lo: dict, r_hi: dict) -> list[str]:
    g_lo, g_hi = r_lo["graph"], r_hi["graph"]
    lo = {s["step"]: s for s in g_lo["steps"]}
    rows = []
    for s in g_hi["steps"]:
        for key, what in (("step_mb", "process"), ("ray_worker_mb", "largest Ray worker")):
            a, b = lo.get(s["step"], {}).get(key), s.get(key)
            if a and b:
                rows.append((b / a, s["step"], what, a, b))
    L = []
    name = f"{label(r_hi)}, {mb_lo} → {mb_hi} MB"
    others = [r for r in rows if r[1] != LSH_STEP]
    if others:
        x, step, what, a, b = max(others)
        L.append(f"{name}: largest peak-RSS growth outside the LSH reduce: `{step}` {what} {a:.0f} → {b:.0f} MB "
                 f"= {x:.3f}× vs cap 1.10× ({'met' if x < 1.10 else 'NOT met'})")
    lsh = next((r for r in rows if r[1] == LSH_STEP and r[2] == "process"), None)
    d_lo, d_hi = g_lo["outputs"].get("dedup_docs"), g_hi["outputs"].get("dedup_docs")
    if lsh and d_lo and d_hi and d_hi > d_lo:
        per_doc = (lsh[4] - lsh[3]) * 1e6 / (d_hi - d_lo)
        L.append(f"{name}: `{LSH_STEP}` (the LSH reduce) process {lsh[3]:.0f} → {lsh[4]:.0f} MB over "
                 f"{d_lo:,} → {d_hi:,} documents = {per_doc:.0f} B per added document vs cap 600 B → "
                 f"{per_doc / 600:.2f} of the cap ({'met' if per_doc <= 600 else 'NOT met'})")
    return L


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               "?")
    mem = _mem_total_gb()
    return f"{os.cpu_count()} CPUs ({cpu}), {mem:.0f} GB RAM, Python {platform.python_version()}"


def _mem_total_gb() -> float:
    for ln in open("/proc/meminfo"):
        if ln.startswith("MemTotal:"):
            return int(ln.split()[1]) / 1e6
    return 0.0


def git_rev() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "mix_assets", "bench/graph.py"],
                           cwd=REPO, capture_output=True, text=True).stdout.strip()
    edited = " (with uncommitted changes to mix_assets/ or bench/graph.py)" if dirty else ""
    return r.stdout.strip() + edited


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 400], help="corpus sizes in MB")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                    help="worker counts: engine.num_cpus, the stages' threads and RAYON_NUM_THREADS")
    ap.add_argument("--engines", nargs="+", default=["local", "ray"], choices=["local", "ray"],
                    help="engine.kind values to measure")
    ap.add_argument("--executor", nargs="+", choices=EXECUTORS, default=list(EXECUTORS),
                    help="in_process: the project's default executor (one run process; the whole-graph "
                         "figure and step seconds); multiprocess: each step in its own process (per-step "
                         "peak RSS; pays a process start per step); default both")
    ap.add_argument("--max-concurrent", type=int, default=1,
                    help="steps the multiprocess executor runs at once (1: a step's seconds are its own)")
    ap.add_argument("--filters", nargs="?", const="cascade", default="none", choices=["none", "cascade", "all"],
                    help=f"--filters (or cascade): add configs/demo.yaml's filters: section (document_filters), "
                         f"keep_share {FILTERS_KEEP_SHARE}; --filters all: that cascade and issue 30's URL filter, "
                         f"line dedup and quality classifier (with a tier) over a corpus with their signals, "
                         f"keep_share {ALL_KEEP_SHARE} (support/filters_mix.py)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin an n-worker run (and the n-thread encode) to n cores")
    ap.add_argument("--repeat", type=int, default=1,
                    help="in-process runs (each with its encode reference right after it) per engine x workers, "
                         "interleaved; the targets use their medians (the host's speed drifts between minutes)")
    ap.add_argument("--quick", action="store_true",
                    help="a 1 MB corpus, writes bench/out/graph/quick.md (checks that the script works)")
    ap.add_argument("--seed", type=int, default=13, help="corpus seed")
    ap.add_argument("--vocab", type=int, default=4096,
                    help="the trained tokenizer's vocab_size (demo's 4096; LLM tokenizers have 32k-256k, and "
                         "encode_batch_fast's MB/s depends on it)")
    ap.add_argument("--bytes-per-token", type=float, default=4.0,
                    help="tokenizer.bytes_per_token_fallback (raw budgets are estimated with it)")
    ap.add_argument("--out", type=Path, default=OUT, help="generated corpora, storage, logs")
    ap.add_argument("--results", type=Path, default=None, help=f"report file (default {RESULTS})")
    ap.add_argument("--append", action="store_true",
                    help="append this run to --results instead of replacing it")
    ap.add_argument("--no-encode", dest="encode", action="store_false",
                    help="skip the raw encode references (memory and plan runs: no graph/encode ratio)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1:])
    compiled_package()  # before any timed child (see there)
    if a.quick:
        a.sizes = [1]
    a.results = a.results or (a.out / "quick.md" if a.quick else RESULTS)

    cmd = command_line("bench/graph.py")
    load0, t_start = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    sections, results = [], {}
    for mb in a.sizes:
        folder = (a.out / f"{mb}mb").resolve()
        if folder.exists():
            subprocess.run(["rm", "-rf", str(folder)], check=True)
        folder.mkdir(parents=True)
        gen = run_child("gen", [mb, folder, a.seed, a.bytes_per_token, a.filters, a.vocab], 1, folder / "gen.log")
        print(f"[{mb} MB] corpus {gen['bytes'] / 1e6:.1f} MB, {gen['docs']:,} docs, {gen['pairs']:,} pairs "
              f"({gen['secs']:.1f} s)", flush=True)
        runs = []
        # repetitions outermost, so the runs they compare (1 vs 2 workers, each with its encode) interleave
        for k, eng, n, ex in itertools.product(range(a.repeat), a.engines, a.workers, a.executor):
            if k and ex != "in_process":
                continue  # memory is a peak per process, not a time: one multiprocess run gives it
            rep = {"rep": k + 1} if a.repeat > 1 and ex == "in_process" else {}
            run_dir = folder / (f"{eng}-{n}-{ex}" + (f"-r{k + 1}" if rep else ""))
            cfg = run_spec(folder / "mix.yaml", eng, n, run_dir)
            graph = run_child("graph", [cfg, a.max_concurrent, ex], n, run_dir / "graph.log", ex,
                              pinned_cores(n, a.pin))
            runs.append({"engine": eng, "workers": n, "executor": ex, "cfg": str(cfg), "graph": graph, **rep})
            top, step = _max_step(graph, "step_mb")
            print(f"[{mb} MB] {label(runs[-1])}: graph {'published' if graph['success'] else 'FAILED'} in "
                  f"{f(graph.get('run_secs'))} s, map stages {f(map_secs(graph))} s, largest step process "
                  f"{f(top, '.0f')} MB ({step})", flush=True)
            if ex == "in_process" and graph["outputs"].get("fingerprint") and a.encode:
                # the host's speed drifts over minutes: this run's reference is measured right after it
                runs[-1]["enc"] = run_child("encode", [cfg], n, run_dir / "encode.log", cores=pinned_cores(n, a.pin))
                print(f"[{mb} MB] raw encode right after it, {n} thread(s): {f(runs[-1]['enc'].get('secs'))} s",
                      flush=True)
        tok = next((r["cfg"] for r in runs if r["graph"]["outputs"].get("fingerprint")), runs[0]["cfg"])
        encs = {}
        for n in a.workers:
            if not a.encode:
                encs[n] = {"skipped": "--no-encode (a memory run)"}
                continue
            encs[n] = run_child("encode", [tok], n, folder / f"encode-{n}.log", cores=pinned_cores(n, a.pin))
            print(f"[{mb} MB] raw encode, {n} thread(s): {f(encs[n].get('secs'))} s", flush=True)
        results[mb] = {"gen": gen, "runs": runs, "encs": encs}
        (folder / "result.json").write_text(json.dumps(results[mb], indent=1))
        sections.append(section(mb, gen, runs, encs))
        print(sections[-1], flush=True)
    tgt = targets(results)
    print("\n".join(tgt), flush=True)
    load1 = os.getloadavg()
    head = "# bench/graph.py: the whole graph vs raw encode_batch_fast (issue 13 §7)\n\n" + (
        __doc__.split("\n\n", 2)[2].split("\n\nGates")[0]) + "\n"
    run = [f"## Run of {t_start}", "", f"    {cmd}", "",
           f"Machine: {machine()}; code at {git_rev()}; engines {', '.join(a.engines)}; workers "
           f"{', '.join(map(str, a.workers))}; executors {', '.join(a.executor)}"
           + (f" (multiprocess max_concurrent {a.max_concurrent})" if "multiprocess" in a.executor else "")
           + (f"; {a.repeat} interleaved repetitions of each in-process run and its encode" if a.repeat > 1 else "")
           + (f"; **tokenizer vocab_size {a.vocab:,}** (`--vocab`; the default is the demo's 4,096)" if a.vocab != 4096 else "")
           + {"cascade": f"; **with the demo's filter cascade** (`--filters`, keep_share {FILTERS_KEEP_SHARE}).",
              "all": f"; **with the demo's filter cascade, the URL filter, line dedup and the quality classifier** "
                     f"(`--filters all`, keep_share {ALL_KEEP_SHARE}).",
              "none": "; no filter cascade."}[a.filters],
           f"Load average (1/5/15 min) at start: {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f}; at end: "
           f"{load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} (2 cores, shared with other work).", "",
           "Against issue 13's targets (figure, reference, ratio):", "", *[f"- {x}" for x in tgt], ""]
    body = "\n".join(run) + "\n" + "\n".join(sections)
    a.results.parent.mkdir(parents=True, exist_ok=True)
    if a.append and a.results.exists():
        a.results.write_text(a.results.read_text().rstrip("\n") + "\n\n" + body)
    else:
        a.results.write_text(head + "\n" + body)
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; wrote {a.results}")


if __name__ == "__main__":
    main()
