"""Production storage, for real: a PostgreSQL server (Debian package) started by the test, the
`storage` section of deploy/dagster.yaml loaded verbatim, and `dagster-daemon` ticking the rebuild
schedule, whose run builds the demo graph with every record (runs, events, checks, ticks) in Postgres.

The demo config is copied with `schedule.cron: "* * * * *"` so the tick comes within a minute.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets.jobs import REBUILD_JOB, SCHEDULE
from mix_assets_tests.support import ui_harness as ui
from mix_assets_tests.support.pgserver import pg_bindir, postgres_server

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy" / "dagster.yaml"
TICK_AND_RUN_TIMEOUT_S = 420

_ENV_FOR_DEPLOY = {
    "DAGSTER_PG_HOST": "db.internal", "DAGSTER_PG_PORT": "5432", "DAGSTER_PG_USER": "dagster",
    "DAGSTER_PG_PASSWORD": "x", "DAGSTER_PG_DB": "dagster", "DAGSTER_COMPUTE_LOG_BUCKET": "logs",
    "DAGSTER_COMPUTE_LOG_PREFIX": "mix", "DAGSTER_K8S_NAMESPACE": "mix", "DAGSTER_K8S_SERVICE_ACCOUNT": "dagster",
    "DAGSTER_USER_CODE_IMAGE": "registry.example.com/mix-assets:0.1.0",
}


def test_deploy_instance_config_validates(monkeypatch):
    """deploy/dagster.yaml passes Dagster's instance schema and each plugin's own config schema."""
    from dagster._config import process_config
    from dagster._core.instance.config import dagster_instance_config
    from dagster._core.instance.ref import InstanceRef

    for k, v in _ENV_FOR_DEPLOY.items():
        monkeypatch.setenv(k, v)
    cfg, _ = dagster_instance_config(str(DEPLOY.parent))
    assert {"storage", "compute_logs", "run_launcher", "concurrency"} <= set(cfg)
    ref = InstanceRef.from_dir(str(DEPLOY.parent))
    assert ref.storage_data.class_name == "DagsterPostgresStorage"
    from dagster_aws.s3.compute_log_manager import S3ComputeLogManager

    logs = process_config(S3ComputeLogManager.config_type(), cfg["compute_logs"]["config"])
    assert logs.success, logs.errors
    k8s = pytest.importorskip("dagster_k8s", reason="deploy extra: pip install .[k8s]")
    launcher = process_config(k8s.K8sRunLauncher.config_type(), cfg["run_launcher"]["config"])
    assert launcher.success, launcher.errors
    assert launcher.value["job_image"] == _ENV_FOR_DEPLOY["DAGSTER_USER_CODE_IMAGE"]


def _terminal(run: dg.DagsterRun) -> bool:
    return run.status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_schedule_tick_rebuilds_the_demo_mix_on_postgres(tmp_path, monkeypatch):
    if pg_bindir() is None:
        pytest.fail("no PostgreSQL server binaries: run scripts/install_system_deps.sh (Debian postgresql)")
    cfg = ui.config_variant(REPO / "configs" / "demo.yaml", tmp_path / "mix.yaml", {
        "schedule": {"cron": "* * * * *", "enabled": True},
        "publish": {"url": str(tmp_path / "published")},
        "storage": {"root": str(tmp_path / "storage"), "cache_dir": str(tmp_path / "cache")},
    })
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "MIX_"))}
    base_env.update({"MIX_CONFIG": str(cfg), "MIX_EXECUTOR": "in_process"})
    with postgres_server() as pg:
        home = tmp_path / "dagster_home"
        home.mkdir()
        storage = yaml.safe_load(DEPLOY.read_text())["storage"]  # verbatim: env-var credentials
        (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": storage, "telemetry": {"enabled": False}}))
        env = {**base_env, **pg.env, "DAGSTER_HOME": str(home)}
        log = home / "daemon.log"
        with open(log, "wb") as fh:
            daemon = subprocess.Popen(
                [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        for k, v in pg.env.items():  # the test's own instance reads the same env-var credentials
            monkeypatch.setenv(k, v)
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            graph = ui.expected_graph(base_env)  # while the daemon starts
            assert {"cron": "* * * * *", "name": SCHEDULE} in graph.schedules
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            deadline = time.monotonic() + TICK_AND_RUN_TIMEOUT_S
            run = None
            while time.monotonic() < deadline:
                assert daemon.poll() is None, f"dagster-daemon exited:\n{log.read_text()[-4000:]}"
                runs = instance.get_runs(dg.RunsFilter(tags={"dagster/schedule_name": SCHEDULE}))
                if runs and _terminal(runs[-1]):
                    run = runs[-1]
                    break
                time.sleep(2)
            assert run is not None, f"no finished scheduled run after {TICK_AND_RUN_TIMEOUT_S}s:\n" + \
                log.read_text()[-4000:]
            assert run.job_name == REBUILD_JOB
            assert run.status == dg.DagsterRunStatus.SUCCESS, f"{run.run_id} {run.status.value}: {ui.failure_reason(home, run.run_id)}"
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait(10)

        # everything the run produced is in Postgres: every asset materialized, every check passed
        for key in graph.assets:
            ev = instance.get_latest_materialization_event(dg.AssetKey.from_user_string(key))
            assert ev is not None and ev.run_id == run.run_id, f"{key} not materialized by {run.run_id}"
        records = instance.event_log_storage.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION, limit=1000).records
        evaluations = {
            f"{r.event_log_entry.dagster_event.asset_check_evaluation_data.asset_key.to_user_string()}:"
            f"{r.event_log_entry.dagster_event.asset_check_evaluation_data.check_name}":
            r.event_log_entry.dagster_event.asset_check_evaluation_data.passed
            for r in records
        }
        # fingerprint_reproduced has nothing to compare on a first publication: it is skipped (no evaluation)
        expected = {f"{a}:{c}" for a, cs in graph.checks.items() for c in cs} - {"manifest:fingerprint_reproduced"}
        assert set(evaluations) == expected and all(evaluations.values()), evaluations
        instance.dispose()

        import psycopg2

        with psycopg2.connect(host=pg.host, port=pg.port, user=pg.user, dbname=pg.db) as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION' "
                        "AND run_id = %s", (run.run_id,))
            assert cur.fetchone()[0] == len(graph.assets)
            cur.execute("SELECT count(*) FROM job_ticks WHERE status = 'SUCCESS'")
            assert cur.fetchone()[0] >= 1, "the schedule tick is not recorded in Postgres"
