"""Jobs, the rebuild schedule and the automation sensor: what the UI offers to launch and automate.

- `rebuild_mix`: the whole graph with every check, one run. Blocking checks stop everything
  downstream of a failed gate inside that run.
- `refresh_<source>`: one source's `raw/<source>` asset and its checks (a source whose upstream
  changed can be re-sampled without touching the others; the rest follows via `rebuild_mix` or the
  automation sensor).
- `rebuild_mix_schedule`: `rebuild_mix` on `spec.schedule.cron` (default weekly), RUNNING unless
  `schedule.enabled: false`, so a deployment rebuilds without someone toggling it in the UI.
- `mix_automation`: declarative automation over the derived assets, STOPPED by default.

Why gates hold across runs (the guard): automated runs come from two places, and each is covered.
1. The schedule launches `rebuild_mix`, which always re-executes the gated assets *and* their checks
   before anything downstream, so a failed gate fails that run's step and Dagster skips the
   downstream steps; an old failed check can never be "skipped over" because it is re-evaluated.
2. Declarative automation would otherwise launch a child as soon as its parent has a new
   materialization, and a parent whose blocking check failed *is* materialized (the check fails
   after the materialization is recorded). So every derived asset gets
   `AutomationCondition.all_deps_blocking_checks_passed()` ANDed into its condition: a child is
   requested only when every blocking check on its direct parents passed (or runs in the same tick).
   Failure then propagates down the chain because an un-materialized child never counts as updated.
A run-status sensor could only react after a run finished; it cannot stop a run that is about to
start, so the guard lives in the conditions that decide which runs start.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import dagster as dg

from mix_assets.config import MixSpec

REBUILD_JOB = "rebuild_mix"
SCHEDULE = "rebuild_mix_schedule"
AUTOMATION_SENSOR = "mix_automation"
SOURCE_PREFIX = "raw"
# roots that read outside inputs; they are refreshed by jobs, never by automation
ROOT_ASSETS = (dg.AssetKey("eval_registry"),)


EXECUTORS = ("multiprocess", "in_process", "k8s")


def executor_from_env() -> dg.ExecutorDefinition:
    """The step executor named by `MIX_EXECUTOR` (default in_process; also pass it to Definitions).

    `in_process` runs every step in the run's own process: a demo step takes about a second, and a
    process per step (multiprocess) would spend far longer importing than computing. `multiprocess`
    runs steps in parallel subprocesses (real mixes on one machine); `k8s` runs every step in its own
    Kubernetes Job (dagster-k8s, `pip install .[k8s]`), so the raw/<source> steps of one rebuild fan
    out over the cluster; see deploy/README.md.
    """
    kind = os.environ.get("MIX_EXECUTOR", "in_process")
    if kind == "multiprocess":
        return dg.multiprocess_executor
    if kind == "in_process":
        return dg.in_process_executor
    if kind == "k8s":
        from dagster_k8s import k8s_job_executor  # optional: installed only where runs go to Kubernetes

        return k8s_job_executor
    raise ValueError(f"MIX_EXECUTOR={kind!r}: expected one of {', '.join(EXECUTORS)}")


def refresh_job_name(source: str) -> str:
    return f"refresh_{source}"


# Derived assets refresh when a parent updated, never past a parent's failed blocking check.
GATED_EAGER = dg.AutomationCondition.eager() & dg.AutomationCondition.all_deps_blocking_checks_passed()
_GUARD_LABEL = "all_deps_blocking_checks_passed"


class Orchestration(NamedTuple):
    assets: list  # the input assets; derived ones carry the gated automation condition
    jobs: list
    schedules: list
    sensors: list


def _is_root(key: dg.AssetKey) -> bool:
    return key.path[0] == SOURCE_PREFIX or key in ROOT_ASSETS


def has_gate_guard(condition: dg.AutomationCondition) -> bool:
    """True when `all_deps_blocking_checks_passed()` is part of `condition` (anywhere in its tree)."""
    if condition.get_label() == _GUARD_LABEL:
        return True
    return any(has_gate_guard(c) for c in condition.children)


def gated_automation(assets: Sequence, condition: dg.AutomationCondition = GATED_EAGER) -> list:
    """Attach `condition` to every derived asset that has no automation condition of its own.

    An asset that already sets one keeps it, but must include the blocking-check guard: we refuse
    a condition without `all_deps_blocking_checks_passed` rather than let it publish past a gate.
    """

    def attach(spec: dg.AssetSpec) -> dg.AssetSpec:
        if _is_root(spec.key):
            return spec
        if spec.automation_condition is None:
            return spec.replace_attributes(automation_condition=condition)
        if not has_gate_guard(spec.automation_condition):
            raise ValueError(
                f"asset {spec.key.to_user_string()}: its automation_condition lacks "
                "AutomationCondition.all_deps_blocking_checks_passed(); an automated run could "
                "materialize it past a failed gate"
            )
        return spec

    # checks defined apart from their asset pass through unchanged, in place
    mapped = iter(dg.map_asset_specs(attach, [a for a in assets if not isinstance(a, dg.AssetChecksDefinition)]))
    return [a if isinstance(a, dg.AssetChecksDefinition) else next(mapped) for a in assets]


def _keys(assets: Sequence) -> set[dg.AssetKey]:
    out: set[dg.AssetKey] = set()
    for a in assets:
        out |= set(a.keys) if isinstance(a, dg.AssetsDefinition) else {a.key}
    return out


def build_jobs(spec: MixSpec, assets: Sequence) -> Orchestration:
    """Jobs, schedule and sensors for `assets` (the Definitions' assets, checks included or not).

    `assets` are returned with the gated automation condition attached (`gated_automation`): pass
    `result.assets` to `Definitions`, not the originals.
    """
    keys = _keys(assets)
    executor = executor_from_env()
    missing = [s.name for s in spec.sources if dg.AssetKey([SOURCE_PREFIX, s.name]) not in keys]
    if missing:
        have = sorted(k.to_user_string() for k in keys)
        raise ValueError(f"{spec.config_path}: sources {missing} have no raw/<source> asset among {have}")

    rebuild = dg.define_asset_job(
        REBUILD_JOB,
        selection=dg.AssetSelection.all(),
        description=f"Rebuild the whole mix '{spec.name}': every source, every stage, every check.",
        tags={"mix/name": spec.name},
        executor_def=executor,
    )
    refresh = [
        dg.define_asset_job(
            refresh_job_name(s.name),
            selection=dg.AssetSelection.assets(dg.AssetKey([SOURCE_PREFIX, s.name])),
            description=f"Re-read source '{s.name}' (raw/{s.name} and its checks) only.",
            tags={"mix/name": spec.name, "mix/source": s.name},
            executor_def=executor,
        )
        for s in spec.sources
    ]
    schedule = dg.ScheduleDefinition(
        name=SCHEDULE,
        job=rebuild,
        cron_schedule=spec.schedule.cron,
        execution_timezone=spec.schedule.timezone,
        default_status=(dg.DefaultScheduleStatus.RUNNING if spec.schedule.enabled
                        else dg.DefaultScheduleStatus.STOPPED),
        description=(f"Rebuild '{spec.name}' on '{spec.schedule.cron}' ({spec.schedule.timezone}); "
                     "check fingerprint_reproduced compares the result with the published revision."),
        tags={"mix/trigger": "schedule"},
    )
    # a list of keys, not `all() - key_prefixes(...)`: the UI shows the target as its selection
    # string, and a key-prefix selection has none (it would show the selection's Python repr)
    derived = dg.AssetSelection.assets(*sorted((k for k in keys if not _is_root(k)), key=lambda k: k.path))
    sensor = dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR,
        target=derived,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=("Propagates a refreshed source through the derived assets, never past a failed "
                     "blocking check (all_deps_blocking_checks_passed)."),
        run_tags={"mix/trigger": "automation"},
    )
    return Orchestration(gated_automation(assets), [rebuild, *refresh], [schedule], [sensor])
