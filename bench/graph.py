"""The whole graph, raw -> published revision, against raw `encode_batch_fast` (issue 13 §7).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/graph.py --sizes 100 400

Corpus: lib/gen_corpus.py (as bench/recall.py uses it), an order-2 word Markov chain over the shared
books (Gutenberg, Sherlock Holmes, Botchan, State of the Union; the fixture's when the shared data
is absent), log-normal lengths (median 330 words), 10 % of the documents with one planted near-copy
at a true 5-word-shingle Jaccard drawn from [0.80, 0.85]; about `--sizes` MB of UTF-8 text spread
(seeded) over four JSONL sources. Seeded, so every run of a size gets the same bytes.

Config: configs/demo.yaml's structure (trained byte-level BPE, vocab 4096, 2 MB training sample,
`<|endoftext|>` separator; dedup 5-word shingles, 128 permutations, threshold 0.8; val_fraction 0.02;
headroom 1.25), audited against the five non-test eval splits of ../shared/data/evals configured as
in configs/shared-sample.yaml. Each source's share is its share of the bytes and target_tokens is
set so each raw budget (budget x headroom) is 97 % of the source's estimated tokens: every source
is read whole and ~97 % of it sampled (a budget of 100 % would leave `budget_met` no slack).
Packing: seq_len 512, 1 Mi-token shards (demo's 64 Ki would mean hundreds of files per 100 MB).

Each measurement runs in a fresh subprocess (peak RSS = VmHWM of that process), in this order:
  gen    = corpus generation and the config (not timed against anything; reported)
  graph  = `rebuild_mix` of the real Definitions (`build_definitions(spec)`), in-process executor,
           ephemeral instance, RAYON_NUM_THREADS=--threads; per-step seconds from the run's
           STEP_START -> STEP_SUCCESS/STEP_FAILURE event timestamps (check steps included); whole
           graph = RUN_START -> RUN_SUCCESS/RUN_FAILURE
  encode = the same text (every document of the JSONL sources, stripped as raw/<source> strips it)
           already in memory, `Tokenizer.encode_batch_fast` in batches of 1,000 documents with the
           graph's own trained tokenizer (mix/tokenizer/tokenizer.json), RAYON_NUM_THREADS=--threads
Ratio = graph MB/s / encode MB/s over the same corpus MB (the graph tokenises only the documents the
budgets need; the encode reference tokenises all of them). CPU s = user + system seconds of that
process over the run / the encode loop (getrusage); on a shared machine the CPU ratio is the one
less moved by other load.

Workers: everything runs in one process today; `--workers` is accepted and only 1 is measured.
2-worker figures come with the Ray engine (issue 13 §2).

Gates are not weakened: a failed blocking check (`val_disjoint_from_train`, `shards_audit_clean`, ...)
stops the run where Dagster stops it, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "graph"
RESULTS = REPO / "bench" / "results" / "graph.md"
SOURCES = ("part_a", "part_b", "part_c", "part_d")


def _status(key: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def peak_rss_mb() -> float:
    return _status("VmHWM") / 1e6


def cpu_secs() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def shared_data() -> Path:
    sys.path.insert(0, str(REPO))
    from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data

    return find_shared_data() or FIXTURE


def eval_tasks(evals: Path) -> list[dict]:
    """configs/shared-sample.yaml's audit tasks (the five non-test eval splits), paths under `evals`."""
    import yaml

    tasks = yaml.safe_load((REPO / "configs" / "shared-sample.yaml").read_text())["audit"]["tasks"]
    for t in tasks:
        t["dataset"]["path"] = str(evals / Path(t["dataset"]["path"]).name)
    return tasks


# -- children ---------------------------------------------------------------------------------
def child_gen(mb: int, folder: Path, seed: int, bpt: float) -> dict:
    import yaml

    from mix_assets.lib import gen_corpus as gc

    data = shared_data()
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    t0 = time.perf_counter()
    model = gc.MarkovModel.from_files(books, order=2)
    corpus = gc.generate_bytes(model, int(mb * 1e6), seed=seed)
    paths = gc.write_jsonl_sources(corpus, folder / "corpus", SOURCES, seed=seed)
    secs = time.perf_counter() - t0
    nbytes = {s: sum(len(json.loads(line)["text"].strip().encode()) for line in open(p))
              for s, p in paths.items()}
    total = sum(nbytes.values())
    shares = {s: round(nbytes[s] / total, 6) for s in SOURCES[:-1]}
    shares[SOURCES[-1]] = round(1.0 - sum(shares.values()), 6)
    headroom, val = 1.25, 0.02
    target = int(0.97 * total / bpt * (1 - val) / headroom)
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
        "tokenizer": {"kind": "train", "vocab_size": 4096, "bytes_per_token_fallback": bpt,
                      "train_sample_bytes": 2000000, "special_tokens": ["<|endoftext|>"]},
        "packing": {"seq_len": 512, "shifted_targets": False, "separator": "<|endoftext|>",
                    "shard_tokens": 1 << 20},
        "dedup": {"shingle_words": 5, "num_perm": 128, "threshold": 0.8, "max_loss_share_warn": 0.3},
        "audit": {"ngram": 13, "mask_contaminated": True, "tasks": eval_tasks(data / "evals")},
        "split": {"val_fraction": val},
        "storage": {"root": str(folder / "storage"), "cache_dir": str(folder / "cache")},
        "publish": {"url": str(folder / "published")},
    }
    (folder / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return {"secs": secs, "docs": len(corpus.texts), "pairs": int(len(corpus.pairs)),
            "j_min": float(corpus.jaccard.min()), "j_max": float(corpus.jaccard.max()),
            "bytes": total, "target_tokens": target, "training_words": int(len(model.stream)),
            "peak_rss_mb": peak_rss_mb()}


def child_graph(cfg: Path) -> dict:
    import dagster as dg

    from mix_assets.config import load_spec
    from mix_assets.definitions import build_definitions
    from mix_assets.jobs import REBUILD_JOB

    t0 = time.perf_counter()
    spec = load_spec(cfg)
    defs = build_definitions(spec)
    instance = dg.DagsterInstance.ephemeral()
    t1, c1 = time.perf_counter(), cpu_secs()
    result = defs.resolve_job_def(REBUILD_JOB).execute_in_process(instance=instance, raise_on_error=False)
    t2, c2 = time.perf_counter(), cpu_secs()
    steps: dict[str, dict] = {}
    run_start = run_end = None
    for e in instance.all_logs(result.run_id):
        ev = e.dagster_event
        if ev is None:
            continue
        kind = ev.event_type_value
        if kind in ("RUN_START", "PIPELINE_START"):
            run_start = e.timestamp
        elif kind in ("RUN_SUCCESS", "RUN_FAILURE", "PIPELINE_SUCCESS", "PIPELINE_FAILURE"):
            run_end = e.timestamp
        elif kind == "STEP_START":
            steps.setdefault(ev.step_key, {})["start"] = e.timestamp
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE", "STEP_SKIPPED"):
            s = steps.setdefault(ev.step_key, {})
            s["end"], s["status"] = e.timestamp, kind.removeprefix("STEP_").lower()
    order = sorted(steps, key=lambda k: steps[k].get("start", float("inf")))
    step_rows = [{"step": k, "status": steps[k].get("status", "?"),
                  "secs": steps[k]["end"] - steps[k]["start"] if {"start", "end"} <= steps[k].keys()
                  else None}
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
            "process_secs": t2 - t0, "setup_secs": t1 - t0, "cpu_secs": c2 - c1, "steps": step_rows,
            "checks": checks,
            "failures": failures, "recall": planted_recall(cfg, spec), "shards": shard_stats(spec),
            "peak_rss_mb": peak_rss_mb()}


def _storage(spec):
    from mix_assets.lib.storage import Storage

    return Storage(spec.resolve(spec.storage.root))


def planted_recall(cfg: Path, spec) -> dict | None:
    """Planted pairs whose two documents both survived raw sampling: how many share a dedup cluster."""
    import pyarrow.parquet as pq

    from mix_assets.lib import layout

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
    pairs = json.loads((cfg.parent / "corpus" / "ground_truth.json").read_text())["pairs"]
    both = [(doc_at[tuple(p["a"])], doc_at[tuple(p["b"])]) for p in pairs
            if tuple(p["a"]) in doc_at and tuple(p["b"]) in doc_at]
    return {"pairs_both_sampled": len(both), "clustered": sum(cluster[a] == cluster[b] for a, b in both)}


def shard_stats(spec) -> dict | None:
    from mix_assets.lib import layout

    p = Path(_storage(spec).local_path(layout.SHARD_STATS))
    if not p.exists():
        return None
    d = json.loads(p.read_text())["splits"]
    return {f"{k} documents": d[k]["documents"] for k in ("train", "val")} | {
        f"{k} tokens": d[k]["emitted_tokens"] for k in ("train", "val")}


def child_encode(cfg: Path) -> dict:
    from tokenizers import Tokenizer

    from mix_assets.config import load_spec
    from mix_assets.lib import layout

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
    return {"bytes": nbytes, "tokens": ntok, "secs": secs, "cpu_secs": cpu, "peak_rss_mb": peak_rss_mb()}


def child(kind: str, args: list[str]) -> None:
    if kind == "gen":
        out = child_gen(int(args[0]), Path(args[1]), int(args[2]), float(args[3]))
    elif kind == "graph":
        out = child_graph(Path(args[0]))
    else:
        out = child_encode(Path(args[0]))
    print("BENCH-RESULT " + json.dumps(out, default=str))


def run_child(kind: str, args: list, threads: int, log: Path) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "MIX_EXECUTOR": "in_process",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        r = subprocess.run([sys.executable, __file__, "--child", kind, *map(str, args)], env=env,
                           stdout=subprocess.PIPE, stderr=fh, text=True)
    wall = time.perf_counter() - t0
    lines = [x for x in r.stdout.splitlines() if x.startswith("BENCH-RESULT ")]
    if r.returncode or not lines:
        raise SystemExit(f"{kind} child failed (exit {r.returncode}); log: {log}\n{r.stdout[-2000:]}")
    out = json.loads(lines[-1].removeprefix("BENCH-RESULT "))
    out["wall_secs"] = wall
    return out


# -- report -----------------------------------------------------------------------------------
def f(x, fmt=".1f") -> str:
    return "—" if x is None else format(x, fmt)


def _gate(c: dict) -> str:
    meta = ", ".join(f"{k} {v}" for k, v in c["meta"].items())
    return f"`{c['check']}` {'passed' if c['passed'] else 'FAILED'}" + (f" ({meta})" if meta else "")


def section(mb: int, gen: dict, graph: dict, enc: dict, workers: int) -> str:
    corpus_mb = gen["bytes"] / 1e6
    L = [f"### {mb} MB corpus ({corpus_mb:.1f} MB text, {gen['docs']:,} documents, {gen['pairs']:,} planted "
         f"near-copy pairs at true Jaccard {gen['j_min']:.3f}-{gen['j_max']:.3f})", ""]
    g_mbps = corpus_mb / graph["run_secs"] if graph.get("run_secs") else None
    e_mbps = corpus_mb / enc["secs"] if "secs" in enc else None
    ratio = g_mbps / e_mbps if g_mbps and e_mbps else None
    cpu_ratio = enc["cpu_secs"] / graph["cpu_secs"] if enc.get("cpu_secs") and graph.get("cpu_secs") else None
    L += ["| workers | graph result | whole graph s (run) | graph MB/s | raw encode s | raw encode MB/s | "
          "**graph ÷ raw encode (MB/s, wall)** | same, on CPU s | graph CPU s | raw encode CPU s | "
          "peak RSS graph process MB | peak RSS encode process MB |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|",
          f"| {workers} | {'published' if graph['success'] else 'FAILED'} | {f(graph.get('run_secs'))} | "
          f"{f(g_mbps, '.2f')} | {f(enc.get('secs'))} | {f(e_mbps, '.2f')} | **{f(ratio, '.2f')}** | "
          f"{f(cpu_ratio, '.2f')} | {f(graph.get('cpu_secs'), '.0f')} | {f(enc.get('cpu_secs'), '.0f')} | "
          f"{f(graph['peak_rss_mb'], '.0f')} | {f(enc.get('peak_rss_mb'), '.0f')} |", ""]
    if "skipped" in enc:
        L += [f"Raw encode skipped: {enc['skipped']}.", ""]
    L += [f"Graph process: {graph['process_secs']:.1f} s in all ({graph['setup_secs']:.1f} s to load the "
          f"spec and build the Definitions); corpus generation {gen['secs']:.1f} s in its own process "
          f"(peak RSS {gen['peak_rss_mb']:.0f} MB, not part of the graph). "
          f"target_tokens {gen['target_tokens']:,}."]
    if enc.get("tokens"):
        L[-1] += f" Raw encode: {enc['tokens']:,} tokens ({enc['bytes'] / enc['tokens']:.2f} B/token)."
    if graph.get("shards"):
        L[-1] += " Shards hold: " + ", ".join(f"{k} {v:,}" for k, v in graph["shards"].items()) + "."
    if graph.get("recall"):
        r = graph["recall"]
        L[-1] += (f" Planted pairs with both documents sampled: {r['clustered']:,}/"
                  f"{r['pairs_both_sampled']:,} in one dedup cluster.")
    L += ["", "| step (Dagster step key) | status | seconds | share of run |", "|---|---|---|---|"]
    for s in graph["steps"]:
        share = s["secs"] / graph["run_secs"] if s["secs"] is not None and graph.get("run_secs") else None
        pct = f(share * 100 if share is not None else None, ".0f")
        L.append(f"| `{s['step']}` | {s['status']} | {f(s['secs'])} | {pct} % |")
    total = sum(s["secs"] or 0 for s in graph["steps"])
    L += [f"| steps summed | | {total:.1f} | |", ""]
    bad = [c for c in graph["checks"] if not c["passed"]]
    gates = [c for c in graph["checks"] if c["check"] in ("val_disjoint_from_train", "shards_audit_clean")]
    L.append("Gates: " + "; ".join(_gate(c) for c in gates)
             + f". Checks evaluated: {len(graph['checks'])}, failed: "
             + (", ".join(f"`{c['check']}` on {c['asset']} ({c['severity']})" for c in bad) or "none") + ".")
    if graph["failures"]:
        L += ["", "Run failures: " + " | ".join(x.replace("\n", " ")[:300] for x in graph["failures"])]
    return "\n".join(L) + "\n"


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
    ap.add_argument("--workers", type=int, nargs="+", default=[1],
                    help="worker counts; only 1 exists until the Ray engine lands (issue 13 §2)")
    ap.add_argument("--threads", type=int, default=2,
                    help="RAYON_NUM_THREADS for the graph and the raw encode")
    ap.add_argument("--seed", type=int, default=13, help="corpus seed")
    ap.add_argument("--bytes-per-token", type=float, default=4.0,
                    help="tokenizer.bytes_per_token_fallback (raw budgets are estimated with it)")
    ap.add_argument("--out", type=Path, default=OUT, help="generated corpora, storage, logs")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--append", action="store_true",
                    help="append this run to --results instead of replacing it")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1:])
    if a.workers != [1]:
        raise SystemExit("--workers: only 1 worker exists today (every stage runs in the run's process); "
                         "2-worker figures come with the Ray engine (issue 13 §2)")

    cmd = "PYTHONPATH=$PWD MIX_SHARED_DATA=" + os.environ.get("MIX_SHARED_DATA", "") + " " + " ".join(
        shlex.quote(x) for x in [os.path.relpath(sys.executable, REPO) if sys.executable.startswith(str(REPO))
                                 else sys.executable, "bench/graph.py", *sys.argv[1:]])
    load0, t_start = os.getloadavg(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    sections = []
    for mb in a.sizes:
        folder = (a.out / f"{mb}mb").resolve()
        if folder.exists():
            subprocess.run(["rm", "-rf", str(folder)], check=True)
        folder.mkdir(parents=True)
        gen = run_child("gen", [mb, folder, a.seed, a.bytes_per_token], 1, folder / "gen.log")
        print(f"[{mb} MB] corpus {gen['bytes'] / 1e6:.1f} MB, {gen['docs']:,} docs, {gen['pairs']:,} pairs "
              f"({gen['secs']:.1f} s)", flush=True)
        graph = run_child("graph", [folder / "mix.yaml"], a.threads, folder / "graph.log")
        state = "published" if graph["success"] else "FAILED"
        print(f"[{mb} MB] graph {state} in {f(graph.get('run_secs'))} s, "
              f"peak RSS {graph['peak_rss_mb']:.0f} MB", flush=True)
        enc = run_child("encode", [folder / "mix.yaml"], a.threads, folder / "encode.log")
        print(f"[{mb} MB] raw encode {f(enc.get('secs'))} s", flush=True)
        (folder / "result.json").write_text(json.dumps({"gen": gen, "graph": graph, "encode": enc}, indent=1))
        sections.append(section(mb, gen, graph, enc, 1))
        print(sections[-1], flush=True)
    load1 = os.getloadavg()
    head = "# bench/graph.py: the whole graph vs raw encode_batch_fast (issue 13 §7)\n\n" + (
        __doc__.split("\n\n", 2)[2].split("\n\nGates")[0]) + "\n"
    run = [f"## Run of {t_start}", "", f"    {cmd}", "",
           f"Machine: {machine()}; code at {git_rev()}; RAYON_NUM_THREADS={a.threads}; workers 1 (2-worker "
           "figures come with the Ray engine, issue 13 §2).",
           f"Load average (1/5/15 min) at start: {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f}; at end: "
           f"{load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} (2 cores, shared with other work).", ""]
    body = "\n".join(run) + "\n" + "\n".join(sections)
    a.results.parent.mkdir(parents=True, exist_ok=True)
    if a.append and a.results.exists():
        a.results.write_text(a.results.read_text().rstrip("\n") + "\n\n" + body)
    else:
        a.results.write_text(head + "\n" + body)
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; wrote {a.results}")


if __name__ == "__main__":
    main()
