"""Every bench script starts as documented (`python bench/<name>.py --help`) on a fresh clone.

A script's folder is first on its import path, so a bench file named like a standard-library module
(bench/tokenize.py was one) replaces that module for every script there: the first `import inspect`
(scipy, dagster and pandas all do it) then loads the bench file instead of the standard `tokenize`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mix_assets_tests.support.shared_data import FIXTURE

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def test_there_are_bench_scripts():
    assert {"dedup.py", "audit.py", "tokens.py", "filters_stage.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_no_bench_file_shadows_a_standard_module(script):
    assert script.stem not in sys.stdlib_module_names, (
        f"bench/{script.name} shadows the standard module {script.stem!r} for every script in bench/"
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_bench_script_help_runs(script, tmp_path):
    # As `python bench/<name>.py` runs it: the bench folder first on sys.path, then what the script's
    # dependencies do on the way (inspect -> linecache -> tokenize; a warning or traceback reads source
    # lines through tokenize.open), then the script as __main__.
    code = (
        "import runpy, sys; "
        f"sys.argv = [{str(script)!r}, '--help']; sys.path.insert(0, {str(BENCH)!r}); "
        "import inspect, linecache; linecache.getlines(inspect.__file__); "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # a fresh clone sets none
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"bench/{script.name} --help failed:\n{r.stderr[-3000:]}"
    assert "usage:" in r.stdout


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """bench/graph.py --quick: the whole graph on a 1 MB corpus, one run (local engine, 1 worker, only the
    in-process executor to keep it short; by default the bench also runs the multiprocess one, for
    per-step memory). Its run folder is what the stage benches below read."""
    out = tmp_path_factory.mktemp("graph-quick")
    # On the in-repo fixture, as on a fresh clone without ../shared (its books and its one eval task)
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent), "MIX_SHARED_DATA": str(FIXTURE)}
    r = subprocess.run([sys.executable, str(BENCH / "graph.py"), "--quick", "--workers", "1", "--engines", "local",
                        "--executor", "in_process", "--out", str(out)], cwd=out, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


@pytest.mark.slow
def test_graph_bench_quick_run_publishes_and_writes_its_report(quick_run):
    report = (quick_run / "quick.md").read_text()
    assert "| local ×1 in_process | published |" in report and "but mix_config.json (shards, tokenizer, review files) identical in every run" in report
    assert "vs cap 1500 MB" in report


def _git_head() -> str | None:
    r = subprocess.run(["git", "-C", str(BENCH.parent), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


# The stage benches that read a finished graph run (its storage), each run on the quick run as documented
# in its --help: --help alone never reaches their measuring code (bench/kernels.py's scan rows crashed on
# every --storage run for a stop unnoticed). `--old` compares with the code at a git revision (this one).
STAGE_BENCHES = {
    "kernels": lambda run, old: ["--corpus", str(run.parent / "corpus" / "part_a.jsonl"), "--storage",
                                 str(run / "storage"), "--mb", "0.3", "--reps", "1", "--chunks", "1"],
    "fused_scan": lambda run, old: ["--run", str(run), "--repeats", "1", "--old", old],
    "token_shards": lambda run, old: ["--run", str(run), "--repeats", "1", "--old", old],
    "shards_audit": lambda run, old: ["--config", str(run / "mix.yaml"), "--reps", "1", "--old", old],
}
SAME = {"kernels": None, "fused_scan": "same outputs every run (report, contaminated docs, fuzzy report and docs, "
        "signature data): True", "token_shards": "same shards, doc index and shard_stats.json every old and new run: True",
        "shards_audit": "reports identical"}


@pytest.mark.slow
@pytest.mark.parametrize("bench", sorted(STAGE_BENCHES))
def test_stage_bench_runs_on_a_graph_run(quick_run, bench, tmp_path):
    old = _git_head()
    if old is None:
        pytest.skip("not a git checkout: the bench's --old needs the repository's history")
    run = quick_run / "1mb" / "local-1-in_process"
    args = STAGE_BENCHES[bench](run, old) + (["--out", str(tmp_path / "out.md")] if bench == "kernels" else [])
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    r = subprocess.run([sys.executable, str(BENCH / f"{bench}.py"), *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"bench/{bench}.py failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    if SAME[bench]:
        assert SAME[bench] in r.stdout, r.stdout[-3000:]
    else:  # every kernel row compares old and new outputs (last column)
        rows = [ln for ln in r.stdout.splitlines() if ln.rstrip().endswith((" True", " False"))]
        assert rows and all(ln.rstrip().endswith(" True") for ln in rows), r.stdout[-3000:]


def test_reader_bench_without_its_peers_says_what_to_install(tmp_path):
    # bench/reader.py compares with litdata and mosaicml-streaming, which CI does not install (the
    # `bench` extra): --help works without them (above), a run stops at once naming what is missing.
    script = BENCH / "reader.py"
    code = (
        "import runpy, sys; sys.modules['litdata'] = None; "
        f"sys.argv = [{str(script)!r}, '--out', {str(tmp_path)!r}, '--streaming-venv', {str(tmp_path / 'v')!r}]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0
    assert "peers and they are missing" in r.stderr
    assert "litdata" in r.stderr and "pip install" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "v").exists()  # no venv was created


def _graph_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("graph_bench", BENCH / "graph.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_graph_bench_names_the_first_step_that_failed_with_an_error():
    # A failed gate is a result the report shows; an error in a step stops the bench, naming the step.
    import dagster as dg

    @dg.asset
    def first():
        return 1

    @dg.asset(deps=[first])
    def broken():
        raise ValueError("evals/hellaswag: not found")

    @dg.asset_check(asset=first, blocking=True)
    def first_is_fine():
        return dg.AssetCheckResult(passed=False)

    first_error = _graph_bench().first_step_error
    r = dg.materialize([first, broken], raise_on_error=False)
    assert first_error(r) == {"step": "broken", "error": "ValueError: evals/hellaswag: not found"}
    gated = dg.materialize([first, broken, first_is_fine], raise_on_error=False, selection=[first, first_is_fine])
    assert not gated.success and first_error(gated) is None


@pytest.mark.slow
def test_incremental_bench_quick_run_writes_its_report(tmp_path):
    # bench/incremental.py --quick on the in-repo fixture, without its optional runs b (no-change) and e
    # (kill and resume: four more builds): the full build, the rebuild after the append, the from-scratch
    # build of the changed data, and the report with the figures the lead re-runs it for.
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent), "MIX_SHARED_DATA": str(FIXTURE)}
    r = subprocess.run([sys.executable, str(BENCH / "incremental.py"), "--quick", "--runs", "d", "--out", str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = (tmp_path / "quick.md").read_text()
    assert "bench/incremental.py --quick --runs d" in report and "/proc/loadavg at start" in report
    assert "(c) rebuild after appending" in report and "vs target ≤ 0.35" in report
    assert "(d) from scratch on the data of (c): published fingerprint **equal**" in report, report
    assert "| a: full build, empty root | published |" in report
    assert "| c: rebuild after +2 % to part_a | published |" in report
    assert "| `token_shards` |" in report
    result = (tmp_path / "1mb" / "result.json").read_text()
    assert '"c"' in result and '"d"' in result
