"""`python -m mix_assets.audit_published` on eval tasks it cannot read: exit 2 (never 1, which means
"overlap found"), a message naming task, file and row on stderr, and no eval text anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mix_assets import audit_published as cli
from mix_assets.config import REPO_ROOT
from mix_assets_tests.support.audit_fixtures import BAD_ROWS, CANARY, GOOD_ROW, make_spec, write_card_repo


def _hub_task(repo, name="hub_cli"):
    return {"name": name, "dataset": {"kind": "hub", "repo_id": str(repo), "revision": "v1.0"},
            "scored_split": "validation", "audit_splits": ["validation"], "fields": ["question"], "min_rows": 1}


def _run(tmp_path, task: dict) -> subprocess.CompletedProcess:
    spec = make_spec(tmp_path, tasks=[task])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    return subprocess.run([sys.executable, "-m", "mix_assets.audit_published", str(tmp_path / "no_revision"),
                           "--config", spec.config_path], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("case", ["deep_nesting", "bad_utf8", "lone_surrogate"])
def test_cli_unreadable_hub_json_exits_2_without_text(tmp_path, case):
    repo = tmp_path / "hubrepo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "validation.jsonl").write_bytes(GOOD_ROW + BAD_ROWS[case][0])
    out = _run(tmp_path, _hub_task(repo))
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert CANARY not in out.stdout + out.stderr
    assert "hub_cli" in out.stderr and "data/validation.jsonl row 2" in out.stderr, out.stderr


def test_cli_card_cast_error_exits_2_without_text(tmp_path):
    repo = write_card_repo(tmp_path / "castrepo", "  - name: question\n    dtype: int64\n",
                      [{"question": f"In the {CANARY} story who counted?"}])
    out = _run(tmp_path, _hub_task(repo))
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert CANARY not in out.stdout + out.stderr
    assert "hub_cli" in out.stderr and "data/validation.parquet" in out.stderr and "question: int64" in out.stderr


def test_cli_local_bad_row_exits_2_without_text(tmp_path):
    d = tmp_path / "evals" / "local_cli"
    d.mkdir(parents=True)
    (d / "validation.jsonl").write_bytes(GOOD_ROW + BAD_ROWS["huge_int"][0])
    task = {**_hub_task(d, "local_cli"), "dataset": {"kind": "local", "path": str(d)}}
    out = _run(tmp_path, task)
    assert out.returncode == 2 and CANARY not in out.stdout + out.stderr
    assert "local_cli" in out.stderr and "validation.jsonl row 2" in out.stderr, out.stderr


def test_cli_any_crash_exits_2_without_its_message(tmp_path, monkeypatch, capsys):
    spec = make_spec(tmp_path)

    def crash(*a, **k):
        raise RuntimeError(f"a library quoting a cell: {CANARY}")

    monkeypatch.setattr(cli.pa_, "audit_published", crash)
    assert cli.main([str(tmp_path / "no_revision"), "--config", spec.config_path]) == 2
    out, err = capsys.readouterr()
    assert CANARY not in out + err
    assert "RuntimeError" in err and "could not run" in err


def test_cli_report_unchanged_for_valid_rows(tmp_path, monkeypatch, capsys):
    """A valid registry gives no empty_rows key in the denominators (the report is byte-identical)."""
    spec = make_spec(tmp_path)
    seen = {}

    def fake(location, spec, cache_dir, **kw):
        ref = cli.pa_.load_reference(spec)
        seen.update(ref.denominators)
        raise cli.pa_.PublishedAuditError("stop here")

    monkeypatch.setattr(cli.pa_, "audit_published", fake)
    assert cli.main([str(tmp_path / "x"), "--config", spec.config_path]) == 2
    assert "empty_rows" not in json.dumps(seen) and seen["demo_qa"]["rows"] == 4
