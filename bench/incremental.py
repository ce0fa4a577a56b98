"""Incremental rebuilds and resume: `rebuild_mix` after new data, against a full build (issue 27 "Targets").

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/incremental.py --sizes 100 400
    ... bench/incremental.py --quick   # a 1 MB corpus, every run, report in bench/out/incremental/quick.md

Corpus and config: bench/graph.py's (`child_gen`, `run_spec`: 4 JSONL sources of order-2 Markov prose over
the shared books, 10 % planted near-copies at a true 5-word-shingle Jaccard in [0.80, 0.85]; its base config,
no filter cascade, engine local with `--workers` everywhere, default 2), with ONE change: the tokenizer is a
fixed file (`tokenizer: {kind: file}`), a byte-level BPE of the same vocab (4096) trained once, before any
run, with the project's own `train_bpe` on a ~2 MB sample of the generated corpus (each source's share of
its first lines). A tokenizer trained by the graph (`kind: train`) is computed from the kept data, so any new
document changes it and with it every token id of every source: no build could then reuse token work.

Runs, each `rebuild_mix` (the whole job, as the schedule runs it) in a fresh process, in-process executor,
timed from its Dagster event log as bench/graph.py times them (RUN_START -> RUN_SUCCESS; per step
STEP_START -> STEP_SUCCESS):
  a      full build on an empty storage root (root A)
  b      no-change rebuild on root A
  c      after appending 2 % new documents (generated the same way, another seed: new text, with their own
         10 % near-copies) to part_a's file (same path, same config): rebuild on root A
  d      from scratch on an empty root, the data of c: its published fingerprint must equal c's
  e0     after another 2 % appended to part_b's file: rebuild on a copy of root A (uninterrupted reference)
  e-kill the same rebuild on root A, its process group SIGKILLed `--kill-at` x e0's token_shards seconds
         after the event log shows token_shards' STEP_START (the run's lease is given a 6 s TTL so
         the rerun can take it over 3 s after the kill instead of 30: core/runlock.py)
  e      the rerun on root A: its token_shards seconds beside e0's, its fingerprint beside f's
  f      from scratch on an empty root, the data of e
Every root has its own cache_dir and publish folder, so a, d and f start cold (no eval cache either) and
b, c, e reuse whatever the code keeps under root A. `--runs` leaves out b, d or e (the unit test runs a, c, d).
"Reused": steps with a log line saying "reused" (the cache hits issue 27 adds; dedup_keys already says it
when it reuses the signatures contamination_report computed in the same run), counted per run from the
event log. When every asset step of b says it, b's step seconds bound the cost of computing and checking
keys from above (target <= 2 % of a); otherwise that cost is reported as not measurable.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import graph  # bench/graph.py: corpus, config, the timed rebuild_mix child and its helpers

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "incremental"
RESULTS = REPO / "bench" / "results" / "incremental.md"
TARGET_INCREMENTAL = 0.35  # issue 27: rebuild after a 2 % append <= 35 % of a full build
TARGET_KEYS = 0.02  # issue 27: computing and checking keys <= 2 % of a full build
APPEND_SHARE = 0.02
TOKENIZER_SAMPLE_BYTES = 2_000_000  # graph.py's train_sample_bytes
KILL_TTL = 6  # MIX_LOCK_TTL_SECONDS of the killed run: its lease is stale TTL/2 after the kill
STEP_START_RE = re.compile(r" - token_shards - STEP_START\b")
STEP_DONE_RE = re.compile(r" - token_shards - STEP_(SUCCESS|FAILURE)\b")


# -- children ---------------------------------------------------------------------------------
def child_gen(mb: int, folder: Path, seed: int, bpt: float, vocab: int) -> dict:
    """graph.py's corpus and base config, then a tokenizer trained once and the config's tokenizer set to it."""
    import yaml

    from mix_assets.stages.tokens import tokenizer as tokenizer_lib

    gen = graph.child_gen(mb, folder, seed, bpt, False, vocab)
    cfg = yaml.safe_load((folder / "mix.yaml").read_text())
    t0 = time.perf_counter()
    texts = []
    for s in cfg["sources"]:
        quota, got = s["share"] * TOKENIZER_SAMPLE_BYTES, 0
        for line in open(s["loader"]["paths"][0]):
            if got >= quota:
                break
            texts.append(json.loads(line)["text"].strip())
            got += len(texts[-1].encode())
    tok_dir = folder / "tokenizer"
    tokenizer_lib.train_bpe(texts, vocab, ["<|endoftext|>"], str(tok_dir))
    cfg["tokenizer"] = {"kind": "file", "path": str(tok_dir / "tokenizer.json"), "bytes_per_token_fallback": bpt}
    cfg["description"] = ("Markov prose, 10 % planted near-copies at Jaccard 0.80-0.85 (bench/graph.py), "
                          "fixed tokenizer file (bench/incremental.py).")
    cfg["name"] = f"incremental_bench_{mb}mb"
    (folder / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return {**gen, "tokenizer_secs": time.perf_counter() - t0,
            "tokenizer_sample_bytes": sum(len(t.encode()) for t in texts)}


def child_append(path: Path, n_docs: int, seed: int) -> dict:
    """`n_docs` new documents (about: `generate` adds 10 % near-copies to its base count) appended to `path`."""
    from mix_assets_tests.support import gen_corpus as gc

    data = graph.shared_data()
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    model = gc.MarkovModel.from_files(books, order=2)
    corpus = gc.generate(model, max(1, round(n_docs / 1.1)), seed=seed)
    before = path.stat().st_size
    with open(path, "a") as fh:
        fh.write("".join(json.dumps({"text": t}) + "\n" for t in corpus.texts))
    return {"docs": len(corpus.texts), "pairs": int(len(corpus.pairs)), "bytes": path.stat().st_size - before}


def child_run(cfg: Path) -> dict:
    """graph.py's timed `rebuild_mix`, plus the published `latest` and the steps whose log says "reused"."""
    import dagster as dg

    out = graph.child_graph(cfg, 1, "in_process")
    if out.get("step_error"):
        return out
    spec_dir = cfg.parent
    latest = spec_dir / "published" / "latest"
    out["latest"] = json.loads(latest.read_text()) if latest.exists() else None
    instance = dg.DagsterInstance.local_temp(str(spec_dir / "dagster_home"))
    run = instance.get_runs(limit=1)[0]
    reused: dict[str, str] = {}  # step -> its first log line saying "reused"
    for e in instance.all_logs(run.run_id):
        if e.step_key and e.dagster_event is None and "reused" in (e.user_message or "").lower():
            reused.setdefault(e.step_key, e.user_message.strip()[:200])
    out["reused_steps"] = reused
    out["asset_steps"] = asset_steps(cfg)
    manifest = _manifest(cfg)
    out["files"] = {f["path"]: f["sha256"] for f in manifest["files"]} if manifest else None
    return out


def asset_steps(cfg: Path) -> list[str]:
    """Step keys of the job's assets (not of its checks), from the Definitions."""
    from mix_assets.config import load_spec
    from mix_assets.definitions import build_definitions

    g = build_definitions(load_spec(cfg)).resolve_asset_graph()
    return sorted(a.node_def.name for a in g.assets_defs if a.keys)


def _manifest(cfg: Path) -> dict | None:
    from mix_assets.config import load_spec
    from mix_assets.core import layout

    p = Path(graph._storage(load_spec(cfg)).local_path(layout.MANIFEST))
    return json.loads(p.read_text()) if p.exists() else None


def child(kind: str, args: list[str]) -> None:
    if kind == "gen":
        out = child_gen(int(args[0]), Path(args[1]), int(args[2]), float(args[3]), int(args[4]))
    elif kind == "append":
        out = child_append(Path(args[0]), int(args[1]), int(args[2]))
    else:
        out = child_run(Path(args[0]))
    print("BENCH-RESULT " + json.dumps(out, default=str), flush=True)


# -- the parent -------------------------------------------------------------------------------
def _env(workers: int, extra: dict | None = None) -> dict:
    return {**os.environ, "RAYON_NUM_THREADS": str(workers), "MIX_EXECUTOR": "in_process", **(extra or {}),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


def _result(stdout: str, code: int, kind: str, log: Path) -> dict:
    lines = [x for x in stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if code or not lines:
        raise SystemExit(f"{kind} child failed (exit {code}); log: {log}\n{stdout[-2000:]}")
    out = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    if out.get("step_error"):
        e = out["step_error"]
        raise SystemExit(f"{kind} child: step {e['step']} failed; stopping here (log: {log})\n{e['error'][-3000:]}")
    return out


def run_child(kind: str, args: list, workers: int, log: Path) -> dict:
    t0, load = time.perf_counter(), os.getloadavg()
    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, __file__, "--child", kind, *map(str, args)], env=_env(workers),
                           stdout=subprocess.PIPE, stderr=fh, text=True)
    return {**_result(r.stdout, r.returncode, kind, log), "wall_secs": time.perf_counter() - t0, "load_before": load}


def killed_run(cfg: Path, workers: int, log: Path, delay: float, timeout: float) -> dict:
    """The rebuild in its own process group, SIGKILLed `delay` s after its log shows token_shards starting."""
    env = _env(workers, {"MIX_LOCK_TTL_SECONDS": str(KILL_TTL)})
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        p = subprocess.Popen([sys.executable, __file__, "--child", "run", str(cfg)], env=env, stdout=subprocess.DEVNULL,
                             stderr=fh, text=True, start_new_session=True)
    started = None
    while time.perf_counter() - t0 < timeout and p.poll() is None:
        if STEP_START_RE.search(log.read_text(errors="replace")):
            started = time.perf_counter()
            break
        time.sleep(0.05)
    if started is None:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return {"killed": False, "why": "token_shards never started (or timed out)", "exit": p.returncode}
    while time.perf_counter() - started < delay and p.poll() is None:
        time.sleep(0.02)
    finished = bool(STEP_DONE_RE.search(log.read_text(errors="replace"))) or p.poll() is not None
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)  # the group this bench started (start_new_session): the run and its children
    p.wait()
    killed_at = time.perf_counter()
    time.sleep(KILL_TTL / 2 + 1)  # until the dead run's lease is stale (core/runlock.is_stale)
    return {"killed": True, "after_start_secs": killed_at - started, "token_shards_had_finished": finished,
            "wall_secs": killed_at - t0, "exit": p.returncode}


def copy_root(src: Path, dst: Path) -> Path:
    """A copy of run folder `src`'s storage, cache and published revisions under `dst`, with its config."""
    import yaml

    dst.mkdir(parents=True)
    for name in ("storage", "cache", "published"):
        if (src / name).exists():
            shutil.copytree(src / name, dst / name, symlinks=True)
    cfg = yaml.safe_load((src / "mix.yaml").read_text())
    cfg["storage"] = {"root": str(dst / "storage"), "cache_dir": str(dst / "cache")}
    cfg["publish"] = {"url": str(dst / "published")}
    (dst / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dst / "mix.yaml"


def step_secs(run: dict, step: str, key: str = "secs") -> float | None:
    s = next((x for x in run.get("steps", []) if x["step"] == step), None)
    return s.get(key) if s else None


def measure(mb: int, a: argparse.Namespace) -> dict:
    folder = (a.out / f"{mb}mb").resolve()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    gen = run_child("gen", [mb, folder, a.seed, a.bytes_per_token, a.vocab], 1, folder / "gen.log")
    print(f"[{mb} MB] corpus {gen['bytes'] / 1e6:.1f} MB, {gen['docs']:,} docs, {gen['pairs']:,} pairs "
          f"({gen['secs']:.1f} s); tokenizer trained on {gen['tokenizer_sample_bytes'] / 1e6:.1f} MB in "
          f"{gen['tokenizer_secs']:.1f} s", flush=True)
    corpus = folder / "corpus"
    n_new = max(1, round(APPEND_SHARE * gen["docs"]))
    runs: dict[str, dict] = {}

    def run(name: str, cfg: Path) -> dict:
        runs[name] = r = run_child("run", [cfg], a.workers, cfg.parent / f"{name}.log")
        print(f"[{mb} MB] {name}: {'published' if r['success'] else 'FAILED'} in {graph.f(r.get('run_secs'))} s "
              f"(process {r['wall_secs']:.1f} s), reused steps {len(r['reused_steps'])}, fingerprint "
              f"{str(r['outputs'].get('fingerprint'))[:16]}", flush=True)
        return r

    def append(source: str, seed: int) -> dict:
        x = run_child("append", [corpus / f"{source}.jsonl", n_new, seed], 1, folder / f"append-{source}.log")
        print(f"[{mb} MB] appended {x['docs']:,} documents ({x['bytes'] / 1e6:.2f} MB) to {source}", flush=True)
        return {"source": source, **x}

    cfg_a = graph.run_spec(folder / "mix.yaml", "local", a.workers, folder / "root-a")
    run("a", cfg_a)
    if "b" in a.runs:
        run("b", cfg_a)
    appends = [append("part_a", a.seed + 1001)]
    run("c", cfg_a)
    if "d" in a.runs:
        run("d", graph.run_spec(folder / "mix.yaml", "local", a.workers, folder / "root-d"))
    res = {"gen": gen, "appends": appends, "runs": runs, "kill": None, "kill_at": a.kill_at}
    if "e" not in a.runs:
        (folder / "result.json").write_text(json.dumps(res, indent=1, default=str))
        return res
    appends.append(append("part_b", a.seed + 1002))
    run("e0", copy_root(folder / "root-a", folder / "root-e0"))
    ref = step_secs(runs["e0"], "token_shards") or 1.0
    kill = killed_run(cfg_a, a.workers, folder / "root-a" / "e-kill.log", a.kill_at * ref, a.timeout)
    print(f"[{mb} MB] e-kill: {kill}", flush=True)
    run("e", cfg_a)
    run("f", graph.run_spec(folder / "mix.yaml", "local", a.workers, folder / "root-f"))
    res["kill"] = kill
    (folder / "result.json").write_text(json.dumps(res, indent=1, default=str))
    return res


# -- report -----------------------------------------------------------------------------------
RUN_LABELS = {"a": "a: full build, empty root", "b": "b: no-change rebuild", "c": "c: rebuild after +2 % to part_a",
              "d": "d: from scratch, data of c", "e0": "e0: rebuild after +2 % to part_b (copy of root A)",
              "e": "e: rerun after the SIGKILL in token_shards", "f": "f: from scratch, data of e"}


def _fp(r: dict) -> str | None:
    return r["outputs"].get("fingerprint")


def _same(x: dict, y: dict) -> str:
    fx, fy = _fp(x), _fp(y)
    if not fx or not fy:
        return "— (no fingerprint: a run did not get to its manifest)"
    if fx == fy:
        return f"**equal** (`{fx[:16]}`)"
    fa, fb = x.get("files") or {}, y.get("files") or {}
    diff = sorted(p for p in set(fa) | set(fb) if fa.get(p) != fb.get(p))
    return (f"**different** (`{fx[:16]}` vs `{fy[:16]}`; {len(diff)} of {len(set(fa) | set(fb))} manifest files "
            f"differ: {', '.join(diff[:6])}{' ...' if len(diff) > 6 else ''})")


def _ratio(x, y) -> float | None:
    return x / y if x is not None and y else None


def _met(r: float | None, cap: float) -> str:
    return "—" if r is None else f"{r:.3f} vs target ≤ {cap} → {r / cap:.2f}× the target ({'met' if r <= cap else 'NOT met'})"


def figures(mb: int, res: dict) -> list[str]:
    R, kill = res["runs"], res["kill"]
    full = R["a"].get("run_secs")
    L = [f"{mb} MB: (c) rebuild after appending {res['appends'][0]['docs']:,} documents to part_a "
         f"{graph.f(R['c'].get('run_secs'))} s ÷ (a) full build {graph.f(full)} s = {_met(_ratio(R['c'].get('run_secs'), full), TARGET_INCREMENTAL)}"
         f"; on CPU seconds (less sensitive to the shared machine's load) {graph.f(R['c'].get('cpu_secs'), '.0f')} ÷ "
         f"{graph.f(R['a'].get('cpu_secs'), '.0f')} = {graph.f(_ratio(R['c'].get('cpu_secs'), R['a'].get('cpu_secs')), '.3f')}"]
    if "d" in R:
        L.append(f"{mb} MB: (d) from scratch on the data of (c): published fingerprint {_same(R['c'], R['d'])} "
                 "to (c)'s" + _latest_note(R["c"], R["d"]))
    if "b" in R:
        L.append(f"{mb} MB: (b) no-change rebuild {graph.f(R['b'].get('run_secs'))} s ÷ (a) {graph.f(full)} s = "
                 f"{graph.f(_ratio(R['b'].get('run_secs'), full), '.3f')}; fingerprint {_same(R['a'], R['b'])} to (a)'s")
    L.append(f"{mb} MB: steps whose log says \"reused\" (whole or in part): " + "; ".join(
        f"({k}) {len(R[k]['reused_steps'])}" + (f" ({', '.join(R[k]['reused_steps'])})" if R[k]["reused_steps"] else "")
        for k in R))
    L.append(f"{mb} MB: " + key_cost(R))
    if kill is None:
        return L
    if not kill.get("killed"):
        L.append(f"{mb} MB: (e) resume NOT measured: {kill.get('why')}")
        return L
    where = ("after token_shards had already finished (the kill missed the step: lower --kill-at)"
             if kill["token_shards_had_finished"] else "in the middle of token_shards")
    e_tok, e0_tok, f_tok = (step_secs(R[k], "token_shards") for k in ("e", "e0", "f"))
    cpu = {k: step_secs(R[k], "token_shards", "cpu_secs") for k in ("e", "e0", "f")}
    L.append(f"{mb} MB: (e) SIGKILL {kill['after_start_secs']:.1f} s after token_shards' STEP_START "
             f"({res['kill_at']} × (e0)'s token_shards {graph.f(e0_tok)} s), {where}; the rerun's token_shards "
             f"{graph.f(e_tok)} s ÷ an uninterrupted one's (e0) {graph.f(e0_tok)} s = "
             f"{graph.f(_ratio(e_tok, e0_tok), '.2f')}; whole rerun {graph.f(R['e'].get('run_secs'))} s ÷ (e0) "
             f"{graph.f(R['e0'].get('run_secs'))} s = {graph.f(_ratio(R['e'].get('run_secs'), R['e0'].get('run_secs')), '.2f')}"
             f"; beside (f) from scratch: token_shards {graph.f(e_tok)} ÷ {graph.f(f_tok)} s = "
             f"{graph.f(_ratio(e_tok, f_tok), '.2f')}, whole run {graph.f(R['e'].get('run_secs'))} ÷ "
             f"{graph.f(R['f'].get('run_secs'))} s = {graph.f(_ratio(R['e'].get('run_secs'), R['f'].get('run_secs')), '.2f')}"
             f"; token_shards on the run process's CPU seconds (less sensitive to load): (e) {graph.f(cpu['e'], '.0f')}, "
             f"(e0) {graph.f(cpu['e0'], '.0f')}, (f) {graph.f(cpu['f'], '.0f')} → (e) ÷ (e0) "
             f"{graph.f(_ratio(cpu['e'], cpu['e0']), '.2f')}")
    L.append(f"{mb} MB: (e) rerun's published fingerprint {_same(R['e'], R['f'])} to (f)'s from-scratch build of "
             f"the same data; (e0) {_same(R['e0'], R['f'])} to (f)'s")
    return L


def key_cost(R: dict) -> str:
    """An upper bound on computing and checking keys: a no-change rebuild (b) in which every asset step says
    "reused" does nothing else but Dagster's own bookkeeping and the checks. Otherwise not measurable here."""
    if "b" not in R:
        return "cost of keys not measured (no run b)"
    assets = [s["step"] for s in R["a"]["steps"] if s["step"] in R["a"]["asset_steps"]]
    b = R["b"]
    missing = [k for k in assets if k not in b["reused_steps"]]
    if missing:
        return (f"cost of computing and checking keys: not measurable from the step logs (counted as 0): in the "
                f"no-change rebuild (b) {len(missing)} of {len(assets)} steps do not say \"reused\" "
                f"({', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''})")
    secs = sum(s["secs"] or 0 for s in b["steps"] if s["step"] in assets)
    full = R["a"].get("run_secs")
    return (f"every step of (b) says \"reused\": their seconds {secs:.2f} s ÷ (a) {graph.f(full)} s = "
            f"{_met(_ratio(secs, full), TARGET_KEYS)} (an upper bound on computing and checking keys)")


def _latest_note(x: dict, y: dict) -> str:
    lx, ly = (r.get("latest") or {} for r in (x, y))
    if lx.get("fingerprint") and lx.get("fingerprint") == _fp(x) and ly.get("fingerprint") == _fp(y):
        return " (each storage's published `latest` names its manifest's fingerprint)"
    return f" (published `latest`: {lx.get('revision')} / {ly.get('revision')})"


def section(mb: int, res: dict) -> str:
    gen, R = res["gen"], res["runs"]
    full = R["a"].get("run_secs")
    L = [f"### {mb} MB corpus ({gen['bytes'] / 1e6:.1f} MB text, {gen['docs']:,} documents, {gen['pairs']:,} "
         f"planted near-copy pairs; tokenizer file trained on {gen['tokenizer_sample_bytes'] / 1e6:.1f} MB)", "",
         "Appended: " + "; ".join(f"{x['docs']:,} documents ({x['bytes'] / 1e6:.2f} MB, {x['pairs']} planted pairs) "
                                  f"to {x['source']}" for x in res["appends"]) + ".", "",
         "| run | result | whole run s | ÷ (a) | CPU s | ÷ (a) | steps summed s | steps saying reused | load avg before | "
         "fingerprint |", "|---|---|---|---|---|---|---|---|---|---|"]
    for k, r in R.items():
        summed = sum(s["secs"] or 0 for s in r["steps"])
        fails = [c["check"] for c in r["checks"] if not c["passed"]]
        result = ("published" if r["success"] else "FAILED") + (f" (failed checks: {', '.join(fails)})" if fails else "")
        L.append(f"| {RUN_LABELS[k]} | {result} | {graph.f(r.get('run_secs'))} | "
                 f"{graph.f(_ratio(r.get('run_secs'), full), '.2f')} | {graph.f(r.get('cpu_secs'), '.0f')} | "
                 f"{graph.f(_ratio(r.get('cpu_secs'), R['a'].get('cpu_secs')), '.2f')} | {summed:.1f} | {len(r['reused_steps'])} | "
                 f"{r['load_before'][0]:.2f} | `{str(_fp(r))[:16]}` |")
    kill = res["kill"]
    if kill and kill.get("killed"):
        L.append(f"| e-kill: the run SIGKILLed in token_shards | killed (exit {kill['exit']}) | "
                 f"{kill['wall_secs']:.1f} (process) | | | | | | | |")
    L += ["", "Per step, seconds STEP_START → STEP_SUCCESS (r: the step's log says reused):", "",
          "| step | " + " | ".join(R) + " |", "|---|" + "---|" * len(R)]
    keys = []
    for r in R.values():
        keys += [s["step"] for s in r["steps"] if s["step"] not in keys]
    for k in keys:
        cells = []
        for r in R.values():
            s = next((x for x in r["steps"] if x["step"] == k), None)
            cells.append("—" if s is None else f"{graph.f(s['secs'], '.2f')}{' r' if k in r['reused_steps'] else ''}"
                         + ("" if s["status"] == "success" else f" {s['status']}"))
        L.append(f"| `{k}` | " + " | ".join(cells) + " |")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 400], help="corpus sizes in MB")
    ap.add_argument("--workers", type=int, default=2,
                    help="engine.num_cpus, the stages' threads and RAYON_NUM_THREADS (engine local)")
    ap.add_argument("--kill-at", type=float, default=0.5,
                    help="SIGKILL this fraction of the uninterrupted (e0) token_shards seconds after its STEP_START")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds to wait for token_shards to start in e-kill")
    ap.add_argument("--runs", nargs="*", choices=["b", "d", "e"], default=["b", "d", "e"],
                    help="optional runs beside a and c: b, d, and e (e0, e-kill, e, f); the unit test leaves out b and e")
    ap.add_argument("--quick", action="store_true",
                    help="a 1 MB corpus, writes bench/out/incremental/quick.md (checks that the script works)")
    ap.add_argument("--seed", type=int, default=13, help="corpus seed (the appends use seed + 1001, + 1002)")
    ap.add_argument("--vocab", type=int, default=4096, help="the fixed tokenizer's vocab_size")
    ap.add_argument("--bytes-per-token", type=float, default=4.0, help="tokenizer.bytes_per_token_fallback")
    ap.add_argument("--out", type=Path, default=OUT, help="generated corpora, storage roots, logs")
    ap.add_argument("--results", type=Path, default=None, help=f"report file (default {RESULTS})")
    ap.add_argument("--append", action="store_true",
                    help="append this run to --results instead of replacing it")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1:])
    graph.compiled_package()  # before any timed child (see there)
    if a.quick:
        a.sizes = [1]
    a.results = a.results or (a.out / "quick.md" if a.quick else RESULTS)
    cmd = graph.command_line("bench/incremental.py")
    load0, t_start = Path("/proc/loadavg").read_text().strip(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
    print(f"/proc/loadavg at start: {load0}", flush=True)
    results, sections, figs = {}, [], []
    for mb in a.sizes:
        results[mb] = measure(mb, a)
        figs += figures(mb, results[mb])
        sections.append(section(mb, results[mb]))
        print("\n".join(figures(mb, results[mb])), flush=True)
    load1 = Path("/proc/loadavg").read_text().strip()
    head = "# bench/incremental.py: incremental rebuilds and resume (issue 27)\n\n" + __doc__.split("\n\n", 2)[2] + "\n"
    body = "\n".join([f"## Run of {t_start}", "", f"    {cmd}", "",
                      f"Machine: {graph.machine()}; code at {graph.git_rev()}; engine local × {a.workers} workers, "
                      f"in-process executor. /proc/loadavg at start: `{load0}`; at end: `{load1}` (shared machine).",
                      "", "Figures beside their references (ratios):", "", *[f"- {x}" for x in figs], "",
                      *sections])
    a.results.parent.mkdir(parents=True, exist_ok=True)
    if a.append and a.results.exists():
        a.results.write_text(a.results.read_text().rstrip("\n") + "\n\n" + body)
    else:
        a.results.write_text(head + "\n" + body)
    print(f"/proc/loadavg at end: {load1}; wrote {a.results}")


if __name__ == "__main__":
    main()
