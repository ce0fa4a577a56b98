"""The capacity plan (`python -m mix_assets.plan`, issue 29 §3): refuses partitions that do not fit the
workers and names the count that does; its figures scale with the corpus; its output parses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mix_assets import plan
from mix_assets.config import REPO_ROOT

# Round numbers, so the expected figures are plain arithmetic.
COSTS = {
    "format": "mix_assets.plan_costs/1",
    "measured": {"date": "test", "code": "test", "host": "test"},
    "bytes_per_doc": 2000.0,
    "chunk_rows": 2048,
    "steps": {
        "contamination_report": {"map": True, "driver_mb": [600.0, 0.0], "worker_mb": 700.0,
                                 "serial_s": [1.0, 0.01], "task_s": [0.0, 0.1], "tasks_per_mb": 0.5,
                                 "disk_mb": [0.0, 0.05]},
        "dedup_keys": {"map": True, "driver_mb": [500.0, 200.0], "worker_mb": 400.0,
                       "serial_s": [2.0, 0.02], "task_s": [0.0, 0.05], "tasks_per_mb": 0.5,
                       "disk_mb": [0.0, 0.02]},
        "tokenizer": {"map": False, "driver_mb": [300.0, 0.0], "worker_mb": None,
                      "serial_s": [5.0, 0.0], "task_s": [0.0, 0.0], "tasks_per_mb": 0.0, "disk_mb": [0.1, 0.0]},
    },
    "scratch_mb": {"parts": [0.0, 0.1], "cache": [0.0, 0.2]},
}


@pytest.fixture
def costs_file(tmp_path):
    p = tmp_path / "costs.json"
    p.write_text(json.dumps(COSTS))
    return p


def _by_step(p: plan.Plan) -> dict:
    return {s.step: s for s in p.steps}


def test_a_reduce_whose_partition_does_not_fit_is_refused_with_the_count_that_fits():
    tb = 10**12  # 5e8 documents x 200 B = 100 GB of dedup_keys columns
    refused = plan.estimate(COSTS, tb, workers=64, partitions=1, worker_memory=16 * 10**9)
    assert not refused.fits
    assert refused.suggested_partitions == 7  # ceil(100,000 MB / (16,000 - 500) MB)
    assert "dedup_keys" in refused.problems[0] and "7 partitions fit" in refused.problems[0]
    ok = plan.estimate(COSTS, tb, workers=64, partitions=7, worker_memory=16 * 10**9)
    assert ok.fits and _by_step(ok)["dedup_keys"].partition_mb <= 16_000
    assert not plan.estimate(COSTS, tb, workers=64, partitions=6, worker_memory=16 * 10**9).fits


def test_a_map_task_that_does_not_fit_any_worker_is_refused_without_a_partition_count():
    p = plan.estimate(COSTS, 10**9, workers=4, partitions=1, worker_memory=650 * 10**6)
    assert not p.fits and p.suggested_partitions is None
    assert any("contamination_report" in x and "engine.chunk_rows" in x for x in p.problems)


def test_figures_scale_with_the_corpus():
    small, big = (_by_step(plan.estimate(COSTS, b, workers=8)) for b in (10**9, 4 * 10**9))
    assert big["dedup_keys"].driver_mb - 500 == pytest.approx(4 * (small["dedup_keys"].driver_mb - 500))
    assert big["contamination_report"].disk_mb == pytest.approx(4 * small["contamination_report"].disk_mb)
    assert big["contamination_report"].wall_s > small["contamination_report"].wall_s
    assert big["tokenizer"].wall_s == small["tokenizer"].wall_s  # a fixed-size sample: no corpus term
    # more workers shorten the map part only
    many = _by_step(plan.estimate(COSTS, 10**9, workers=80))
    assert many["contamination_report"].wall_s == pytest.approx(1.0 + 10 + 100 / 80)
    assert small["contamination_report"].wall_s == pytest.approx(1.0 + 10 + 100 / 8)


def test_sizes_parse_and_bad_ones_are_named():
    assert plan.parse_bytes("16G") == 16 * 10**9
    assert plan.parse_bytes("1.5TB") == 1_500_000_000_000
    assert plan.parse_bytes("2GiB") == 2 * 2**30
    assert plan.parse_bytes("123") == 123
    with pytest.raises(plan.PlanError, match="'16 parsecs'"):
        plan.parse_bytes("16 parsecs")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "mix_assets.plan", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO_ROOT)


def test_cli_json_parses_and_a_refusal_exits_3(costs_file):
    cfg = REPO_ROOT / "configs" / "demo.yaml"
    ok = _cli(cfg, "--workers", 64, "--worker-memory", "16G", "--corpus-bytes", "1TB", "--partitions", 7,
              "--costs", costs_file, "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["fits"] and out["corpus_bytes"] == 10**12 and out["documents"] == 5 * 10**8
    assert {s["step"] for s in out["steps"]} == set(COSTS["steps"])
    no = _cli(cfg, "--workers", 64, "--worker-memory", "16G", "--corpus-bytes", "1TB", "--costs", costs_file)
    assert no.returncode == plan.EXIT_REFUSED
    assert "plan refused" in no.stderr and "--partitions 7" in no.stderr
    assert "dedup_keys" in no.stdout  # the table is still printed
    bad = _cli(cfg, "--workers", 2, "--worker-memory", "lots", "--costs", costs_file)
    assert bad.returncode == plan.EXIT_ERROR and "'lots'" in bad.stderr


def test_corpus_bytes_default_to_the_sources_files(tmp_path):
    from mix_assets.config import load_spec
    from mix_assets_tests.support.ui_harness import config_variant

    data = tmp_path / "a.jsonl"
    data.write_text('{"text": "hello"}\n' * 100)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "x.txt").write_text("y" * 1000)
    cfg = config_variant(REPO_ROOT / "configs" / "demo.yaml", tmp_path / "mix.yaml", {})
    spec = load_spec(cfg)
    srcs = [spec.sources[0].model_copy(update={"loader": spec.sources[0].loader.model_copy(update={"paths": [str(data)]})}),
            spec.sources[3].model_copy(update={"loader": spec.sources[3].loader.model_copy(
                update={"paths": [str(tmp_path / "folder")]})})]
    assert plan.source_bytes(spec.model_copy(update={"sources": srcs})) == data.stat().st_size + 1000
    gone = [srcs[0].model_copy(update={"loader": srcs[0].loader.model_copy(update={"paths": [str(tmp_path / "nope*.jsonl")]})})]
    with pytest.raises(plan.PlanError, match="--corpus-bytes"):
        plan.source_bytes(spec.model_copy(update={"sources": gone}))


def test_the_recorded_coefficients_load_and_plan_the_demo():
    costs = plan.load_costs()
    assert costs["measured"]["command"].startswith("PYTHONPATH")
    p = plan.estimate(costs, 10**12, workers=640, worker_memory=64 * 10**9)
    assert p.steps and all(s.wall_s >= 0 and s.driver_mb > 0 for s in p.steps)
