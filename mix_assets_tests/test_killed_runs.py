"""A whole Dagster run SIGKILLed in the middle of each mapped stage, then run again (issue 27, "Resume").

The stage-level tests (test_decisions, test_dedup_signatures, test_eval_scan, test_token_cache) kill the
stage's function; here the killed process is a run of every asset of the demo (the in-process executor, as
`dagster job execute` runs it), killed once `AFTER` chunks of one stage are done. The next run, in this
process, must resume that stage from the parts the killed run left (its log says so), compute fewer chunks
of it than an uninterrupted build, and publish the uninterrupted build's fingerprint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets.config import load_spec
from mix_assets.resources import storage_for
from mix_assets.stages.audit import eval_scan
from mix_assets.stages.filters import decisions
from mix_assets.stages.tokens import shards
from mix_assets_tests.support import killed
from mix_assets_tests.test_integrity_lineage import failures, materialize, private_demo

pytestmark = pytest.mark.slow

AFTER = 2  # chunks of the stage done when the run is killed
# asset -> (module, chunk function, folder of what a finished chunk leaves). The demo signs its dedup
# signatures in contamination_report's scan (eval_scan's fused pass), so dedup_keys maps nothing here.
STAGES = {
    "document_filters": (decisions, "decide_chunk", "parts/filters"),
    "contamination_report": (eval_scan, "_scan_task", "parts/contamination"),
    "token_shards": (shards, "encode_chunk", "tokens/cache"),
}


def _fingerprint(cfg: Path) -> str:
    return json.loads(storage_for(load_spec(cfg)).read_text("mix/manifest.json"))["fingerprint"]


def _wipe(tmp: Path) -> None:
    for d in ("storage", "cache", "published"):
        shutil.rmtree(tmp / d, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo at 100 documents per map task (4 chunks per source), one worker; its uninterrupted build's
    fingerprint and chunk calls per stage."""
    tmp = tmp_path_factory.mktemp("killed_runs")
    cfg = private_demo(tmp)
    d = yaml.safe_load(cfg.read_text())
    d["engine"].update(num_cpus=1, chunk_rows=100)
    cfg.write_text(yaml.safe_dump(d, sort_keys=False))
    mp = pytest.MonkeyPatch()
    counters = {}
    for label, (module, fn, _) in STAGES.items():
        counters[label] = killed.Counter(getattr(module, fn))
        mp.setattr(module, fn, counters[label])
    try:
        r = materialize(cfg, dg.DagsterInstance.ephemeral())
    finally:
        mp.undo()
    assert r.success, failures(r)
    calls = {label: c.calls for label, c in counters.items()}
    assert all(n > AFTER for n in calls.values()), calls  # every stage has chunks left after the kill
    return {"tmp": tmp, "cfg": cfg, "fingerprint": _fingerprint(cfg), "calls": calls}


@pytest.mark.parametrize("label", list(STAGES))
def test_a_run_killed_mid_stage_resumes_there_and_publishes_the_uninterrupted_bytes(demo, label, monkeypatch):
    tmp, cfg = demo["tmp"], demo["cfg"]
    _wipe(tmp)
    module, fn, left = STAGES[label]
    marks = tmp / f"marks-{fn}"
    marks.unlink(missing_ok=True)
    killed.run_killed(f"""
import os
import dagster as dg
from pathlib import Path
import {module.__name__} as m
os.environ["MIX_LOCK_TTL_SECONDS"] = "4"  # the run's checkout claim goes stale 2 s after the kill
slowed(m, {fn!r}, {str(marks)!r})
from mix_assets_tests.test_integrity_lineage import materialize
materialize(Path({str(cfg)!r}), dg.DagsterInstance.ephemeral())
raise SystemExit("the run finished before it was killed")
""", marks, AFTER, timeout=300)
    storage = storage_for(load_spec(cfg))
    parts = len([k for k in storage.list(left) if k.endswith((".arrow", ".parquet"))])
    assert parts, "the killed run left no chunk part to resume from"
    assert not storage.exists("mix/manifest.json")  # killed before it could publish anything

    counter = killed.Counter(getattr(module, fn))
    monkeypatch.setattr(module, fn, counter)
    instance = dg.DagsterInstance.ephemeral()
    r = materialize(cfg, instance)
    assert r.success, failures(r)
    logs = [e.user_message for e in instance.all_logs(r.run_id)]
    # the killed run's claim on the root's checkout (core/checkout.py) is waited out or found dead, so this run
    # works where the killed run's parts are (before issue 27 item 7: token_shards took over its run lease)
    assert any(m.startswith("checkout main: ") and ("waiting for the claim of run" in m or "dead claim" in m)
               for m in logs), [m for m in logs if "checkout" in m]
    if label == "token_shards":  # its chunks' ids are read back from the token-id cache
        said = [m for m in logs if "from the token cache" in m]
        assert said and ", 0 from the token cache" not in said[0], said
    else:
        said = [m for m in logs if m.startswith(f"{label}: resumed ") and "from a killed run" in m]
        assert said, [m for m in logs if "resumed" in m]
    # the chunks the killed run finished are not computed again
    assert 0 < counter.calls <= demo["calls"][label] - parts, (counter.calls, parts, demo["calls"][label])
    assert _fingerprint(cfg) == demo["fingerprint"]
    assert storage.list("parts") == []  # resumed parts are removed once their stage's file is written
