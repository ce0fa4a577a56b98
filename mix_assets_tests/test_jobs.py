"""Jobs, schedule and the cross-run gate guard, on a small graph shaped like the mix.

The toy graph has the mix's shape where it matters for the guard (raw/<source> roots, a gated
middle asset with a blocking check, children below it); the real graph is covered by the
Definitions tests and the browser/Postgres end-to-end tests.
"""

from __future__ import annotations

import dagster as dg
import pytest

from mix_assets.config import parse_spec
from mix_assets.jobs import (
    AUTOMATION_SENSOR,
    GATED_EAGER,
    REBUILD_JOB,
    SCHEDULE,
    build_jobs,
    gated_automation,
    has_gate_guard,
)


def _src(name: str, share: float) -> dict:
    return {"name": name, "loader": {"kind": "jsonl", "paths": [f"{name}.jsonl"]}, "text_field": "text",
            "license": "cc-by-4.0", "rationale": f"{name}: a source with a stated reason to be in the mix",
            "share": share}


def _spec(cron: str = "0 3 * * 0", enabled: bool = True):
    src = _src
    return parse_spec({"name": "toy", "target_tokens": 1000, "sources": [src("alpha", 0.5), src("beta", 0.5)],
                       "schedule": {"cron": cron, "enabled": enabled}}, "toy.yaml")


def _toy_assets(gate_passes: dict):
    """raw/alpha, raw/beta -> masks (blocking check `clean`) -> split -> shards."""

    def raw(name):
        @dg.asset(key=["raw", name], group_name="sources")
        def _raw() -> dg.MaterializeResult:
            return dg.MaterializeResult(metadata={"n_docs": 3})

        return _raw

    @dg.asset(deps=[dg.AssetKey(["raw", "alpha"]), dg.AssetKey(["raw", "beta"])],
              check_specs=[dg.AssetCheckSpec("clean", asset="masks", blocking=True)])
    def masks() -> dg.MaterializeResult:
        return dg.MaterializeResult(check_results=[dg.AssetCheckResult(passed=gate_passes["value"])])

    @dg.asset(deps=[masks])
    def split() -> None:
        return None

    @dg.asset(deps=[split])
    def shards() -> None:
        return None

    return [raw("alpha"), raw("beta"), masks, split, shards]


def _defs(gate_passes: dict, spec=None) -> dg.Definitions:
    orch = build_jobs(spec or _spec(), _toy_assets(gate_passes))
    return dg.Definitions(assets=orch.assets, jobs=orch.jobs, schedules=orch.schedules, sensors=orch.sensors)


def test_jobs_schedule_and_sensor_are_defined():
    defs = _defs({"value": True}, _spec(cron="15 4 * * 1"))
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    assert {j for j in repo.job_names if not j.startswith("__")} == {REBUILD_JOB, "refresh_alpha", "refresh_beta"}
    assert {k.to_user_string() for k in defs.resolve_job_def(REBUILD_JOB).asset_layer.executable_asset_keys} == {
        "raw/alpha", "raw/beta", "masks", "split", "shards"}
    assert {k.to_user_string() for k in defs.resolve_job_def("refresh_beta").asset_layer.executable_asset_keys} == {
        "raw/beta"}
    sched = repo.get_schedule_def(SCHEDULE)
    assert sched.cron_schedule == "15 4 * * 1" and sched.job_name == REBUILD_JOB
    assert sched.default_status == dg.DefaultScheduleStatus.RUNNING
    sensor = repo.get_sensor_def(AUTOMATION_SENSOR)
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED
    # derived assets carry the guard; roots carry no automation
    conds = {k.to_user_string(): s.automation_condition for k, s in
             ((s.key, s) for a in defs.assets for s in a.specs)}
    assert conds["raw/alpha"] is None and has_gate_guard(conds["split"]) and has_gate_guard(conds["masks"])


def test_sensor_target_reads_as_a_selection_string_in_the_ui():
    """The UI shows `str(target & code_location)`; a selection without a string form shows its repr."""
    from dagster._core.definitions.asset_selection import CodeLocationAssetSelection

    defs = _defs({"value": True})
    graph = defs.resolve_asset_graph()
    target = defs.get_repository_def().get_sensor_def(AUTOMATION_SENSOR).asset_selection
    shown = str(target.to_serializable_asset_selection(graph)
                & CodeLocationAssetSelection(selected_code_location="mix_assets"))
    assert shown == '(key:"masks" or key:"shards" or key:"split") and code_location:"mix_assets"', shown
    assert {k.to_user_string() for k in target.resolve(graph)} == {"masks", "split", "shards"}
    assert {c.name for c in target.resolve_checks(graph)} == {"clean"}


def test_schedule_can_be_disabled_and_missing_sources_fail_loudly():
    defs = _defs({"value": True}, _spec(enabled=False))
    assert defs.get_repository_def().get_schedule_def(SCHEDULE).default_status == dg.DefaultScheduleStatus.STOPPED
    with pytest.raises(ValueError, match=r"\['beta'\] have no raw/<source> asset"):
        build_jobs(_spec(), _toy_assets({"value": True})[:1] + _toy_assets({"value": True})[2:])


def test_unguarded_custom_condition_is_refused():
    @dg.asset(key=["raw", "alpha"])
    def raw_alpha() -> None: ...

    @dg.asset(deps=[raw_alpha], automation_condition=dg.AutomationCondition.eager())
    def child() -> None: ...

    with pytest.raises(ValueError, match="child: its automation_condition lacks"):
        gated_automation([raw_alpha, child])

    @dg.asset(deps=[raw_alpha], automation_condition=dg.AutomationCondition.on_cron("0 * * * *")
              & dg.AutomationCondition.all_deps_blocking_checks_passed())
    def guarded() -> None: ...

    assert len(gated_automation([raw_alpha, guarded])) == 2
    assert has_gate_guard(GATED_EAGER) and not has_gate_guard(dg.AutomationCondition.eager())


def _materialized(instance, key: str) -> bool:
    return instance.get_latest_materialization_event(dg.AssetKey.from_user_string(key)) is not None


def test_schedule_tick_runs_rebuild_and_gate_holds_in_run_and_across_automation():
    gate = {"value": False}
    defs = _defs(gate)
    unguarded = dg.Definitions(assets=list(dg.map_asset_specs(
        lambda s: s.replace_attributes(automation_condition=dg.AutomationCondition.eager()), _toy_assets(gate))))
    with dg.instance_for_test() as instance:
        # the automation sensor's first tick: nothing is materialized, nothing requested
        auto = dg.evaluate_automation_conditions(defs=defs, instance=instance)
        plain = dg.evaluate_automation_conditions(defs=unguarded, instance=instance)
        assert auto.total_requested == 0 and plain.total_requested == 0

        # a schedule tick, evaluated as the daemon does, asks for rebuild_mix ...
        sched = defs.get_repository_def().get_schedule_def(SCHEDULE)
        requests = sched.evaluate_tick(dg.build_schedule_context(instance=instance)).run_requests
        assert len(requests) == 1 and requests[0].tags.get("mix/trigger") == "schedule"
        result = defs.resolve_job_def(REBUILD_JOB).execute_in_process(
            instance=instance, tags=requests[0].tags, raise_on_error=False)
        # ... whose failed gate stops split and shards in the same run
        assert not result.success
        assert {e.check_name: e.passed for e in result.get_asset_check_evaluations()} == {"clean": False}
        assert _materialized(instance, "masks") and not _materialized(instance, "split")

        # the next automation tick must not request anything below the failed gate although masks
        # has a fresh materialization; plain eager (the control) does request split
        auto = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=auto.cursor)
        plain = dg.evaluate_automation_conditions(defs=unguarded, instance=instance, cursor=plain.cursor)
        assert _requested(auto) == set()
        assert "split" in _requested(plain), "control: without the guard, eager requests split here"

        # once the gate passes, automation propagates again
        gate["value"] = True
        defs.resolve_job_def(REBUILD_JOB).execute_in_process(instance=instance, asset_selection=[
            dg.AssetKey("masks")])
        auto = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=auto.cursor)
        assert _requested(auto) == {"split", "shards"}  # one run for the chain below the gate


def _requested(result) -> set[str]:
    keys = ["raw/alpha", "raw/beta", "masks", "split", "shards"]
    return {k for k in keys if result.get_num_requested(dg.AssetKey.from_user_string(k)) > 0}


def test_executor_from_env(monkeypatch):
    from mix_assets.jobs import executor_from_env

    monkeypatch.delenv("MIX_EXECUTOR", raising=False)
    assert executor_from_env() is dg.in_process_executor  # the UI's default: no process per step
    monkeypatch.setenv("MIX_EXECUTOR", "multiprocess")
    assert executor_from_env() is dg.multiprocess_executor
    monkeypatch.setenv("MIX_EXECUTOR", "k8s")
    k8s = pytest.importorskip("dagster_k8s")
    assert executor_from_env() is k8s.k8s_job_executor
    monkeypatch.setenv("MIX_EXECUTOR", "ray")
    with pytest.raises(ValueError, match="MIX_EXECUTOR='ray': expected one of multiprocess"):
        executor_from_env()
