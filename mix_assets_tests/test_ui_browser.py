"""The web UI, in a real browser: dagster-webserver on loopback + headless Debian chromium (Playwright).

1. Demo config: the asset graph shows every asset of the Definitions; "Materialize all" from the UI
   runs to Success; the Checks tabs of `manifest` and `contamination_report` read "Passed" for every
   check (while those assets are not on the graph yet, the checks of every source asset instead).
   `fingerprint_reproduced` reads "Skipped" (nothing published before this run) and its page says
   why. Every asset whose metadata carries a chart is opened on its "[Show Markdown]" dialog: the
   chart is shown at its own pixel size (drawn for the UI, not scaled down) and screenshotted. At
   1,600 px the tables show the columns that decide (kill_rates' kill_share, composition's, the
   overlap table's overlap_ngrams), a stored `object.__add__(self, other)` renders literally (no bold
   "add"), and the rendered samples fit their dialog.
2. Failing gate (`audit.mask_contaminated: false`), launched from Jobs -> rebuild_mix (a run of that job):
   the run fails and its page opens on the gate's summary (which gate, why, what was held back, what
   is still published); `zero_eval_overlap` reads "Failed", every asset downstream of `exclusion_masks`
   is listed as not executed, and the Runs list shows the run's mix/failed_gate tag; the lineage below
   the gate is screenshotted (docs/ui.md explains what the graph shows).
3. Unsynced after a config edit (issue 27): the demo built once into the webserver's instance; the config
   edited as a user does (the file MIX_CONFIG names, then "Reload definitions"): the assets the UI marks
   Unsynced on the lineage graph (the stale dot on each node) are exactly the readers of the edited field
   and everything downstream of them (test_unsynced.py's cases: a filter threshold, an eval task's
   min_rows); none right after the build and none after a no-op edit. For the filter edit, the asset pages
   either side of the edge read the same (the header's "Unsynced" tag on document_filters and dedup_keys,
   none on raw/stories and contamination_report).
Screenshots land in test-output/ui/; `MIX_UPDATE_DOCS_SCREENSHOTS=1` also refreshes the copies in
docs/img/ (palette PNGs, < 100 KB each): the README's graph, one chart page per asset (the first
raw/<source> stands for all) and the failed gate's lineage.

Needs /usr/bin/chromium (scripts/install_system_deps.sh) and pip playwright.
"""

from __future__ import annotations

import os
import re

import pytest

from mix_assets.stages.common import FAILED_GATE_TAG, STILL_PUBLISHED_TAG
from mix_assets.stages.publish.reproducibility import FINGERPRINT_REPRODUCED
from mix_assets_tests.support import ui_harness as ui
from mix_assets_tests import test_unsynced as unsynced

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(900)]

DEMO = ui.REPO / "configs" / "demo.yaml"
DOCS_IMG = ui.REPO / "docs" / "img"
README_SHOT = DOCS_IMG / "ui-asset-graph.png"
GATE_ASSET, GATE_CHECK = "exclusion_masks", "zero_eval_overlap"
RUN_TIMEOUT_S = 600
# (asset, table metadata entry, the columns its gates decide on): each must be visible at 1,600 px
DECIDING = [
    ("document_filters", "kill_rates", ["source", "filter", "kill_share"]),
    ("exclusion_masks", "composition", ["source", "tokens_after", "lost_token_share"]),
    ("contamination_report", "overlap", ["source", "task", "overlap_ngrams"]),
]


@pytest.fixture(scope="module", autouse=True)
def _browser_available():
    if not os.path.exists(ui.CHROMIUM):
        pytest.fail(f"{ui.CHROMIUM} missing: run scripts/install_system_deps.sh (Debian package chromium)")
    pytest.importorskip("playwright.sync_api", reason="pip playwright is part of the test extra")


def _docs_copy(shot, name: str) -> None:
    """Refresh docs/img/<name>.png from a screenshot, on purpose only (MIX_UPDATE_DOCS_SCREENSHOTS=1)."""
    if os.environ.get("MIX_UPDATE_DOCS_SCREENSHOTS") == "1":
        dest = ui.save_small_png(shot, DOCS_IMG / f"{name}.png")
        assert dest.stat().st_size < 100_000, dest


def _env(tmp_path, overrides: dict) -> dict[str, str]:
    cfg = ui.config_variant(DEMO, tmp_path / "mix.yaml", {
        "publish": {"url": str(tmp_path / "published")},
        "storage": {"root": str(tmp_path / "storage"), "cache_dir": str(tmp_path / "cache")},
        **overrides,
    })
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "MIX_"))}
    return {**env, "MIX_CONFIG": str(cfg)}  # the default executor, as `make ui` runs it


def test_materialize_all_from_the_ui_and_read_the_checks(tmp_path):
    env = _env(tmp_path, {})
    graph = ui.expected_graph(env)
    assert "rebuild_mix" in graph.jobs and graph.schedules, graph.jobs
    with ui.webserver(env, tmp_path / "dagster_home") as web, ui.browser_page() as page:
        shown = ui.graph_node_names(page, web.url)
        ui.shot(page, "01-asset-graph")
        assert ui.missing_from_graph(shown, graph.assets) == [], f"graph shows {shown}"
        assert len(shown) == len(graph.assets), f"graph shows {shown}, Definitions have {graph.assets}"

        run_id = ui.materialize_all(page, web.url)
        status = ui.wait_for_run(page, web.url, run_id, RUN_TIMEOUT_S)
        ui.shot(page, "02-run")
        assert status == "Success", f"run {run_id} ended {status}: {ui.failure_reason(web.home, run_id)}"

        wanted = [a for a in ("manifest", "contamination_report") if a in graph.checks]
        # until those stages are on the graph, read the gates that exist (the source checks)
        targets = wanted or sorted(a for a in graph.checks if a.startswith("raw/"))
        assert targets, f"no asset with checks in {graph.checks}"
        for asset in targets:
            results = ui.check_results(page, web.url, asset, graph.checks[asset])
            ui.shot(page, f"03-checks-{asset.replace('/', '_')}")
            gates = {c: r for c, r in results.items() if f"{asset}:{c}" in graph.blocking}
            # nothing was published before this run: nothing to compare with, so no result at all
            assert results.get(FINGERPRINT_REPRODUCED, "Skipped") == "Skipped", (asset, results)
            gates.pop(FINGERPRINT_REPRODUCED, None)
            assert gates and set(gates.values()) == {"Passed"}, (asset, results)
            # advisories (WARN) may flag, e.g. a source above the contamination-rate warning, but ran
            ran = {c: r for c, r in results.items() if c != FINGERPRINT_REPRODUCED}
            assert all(r in ("Passed", "Warning", "Failed") for r in ran.values()), (asset, results)

        # a skipped fingerprint_reproduced says why on its own page (its description, under "About")
        if FINGERPRINT_REPRODUCED in graph.checks.get("manifest", []):
            page.goto(f"{web.url}/assets/manifest?view=checks&checkDetail={FINGERPRINT_REPRODUCED}")
            page.get_by_text("Evaluation result", exact=True).wait_for()
            page.get_by_text("Skipped (no result, grey) when there is nothing to compare with").first.wait_for()
            page.get_by_text("nothing published yet from this storage root").first.wait_for()
            ui.shot(page, "03-checks-fingerprint_reproduced-skipped")

        # every chart, as the UI shows it: at its own pixel size, not squeezed
        charts = ui.chart_entries(web.home)
        assert {"contamination_report", "dedup_keys", "exclusion_masks"} <= set(charts), charts
        assert {a for a in graph.assets if a.startswith("raw/")} <= set(charts), charts
        first_raw = min(a for a in charts if a.startswith("raw/"))
        for asset, keys in sorted(charts.items()):
            natural, shown = ui.open_chart(page, web.url, asset, keys[-1])
            assert shown == natural >= 700, (asset, keys[-1], natural, shown)
            shot = ui.shot(page, f"06-chart-{asset.replace('/', '_')}")
            ui.close_dialog(page)
            if not asset.startswith("raw/") or asset == first_raw:
                _docs_copy(shot, "ui-chart-" + asset.split("/")[0])

        # at 1,600 px every table shows the columns that decide (the UI cuts a wider table), and stored
        # text renders literally: `object.__add__(self, other)` (a near-dup sample) is no bold "add"
        page.set_viewport_size({"width": 1600, "height": 1000})
        for asset, key, deciding in DECIDING:
            shown = ui.table_columns_shown(page, web.url, asset, key)
            ui.shot(page, f"07-table-{asset}-{key}")
            assert {c for c in deciding if shown.get(c)} == set(deciding), (asset, key, shown)
            assert all(shown.values()), f"{asset} {key}: columns cut at 1,600 px: {shown}"
        for asset, key in [(a, k) for a, k, _ in DECIDING] + [("token_shards", "per_source"), ("manifest", "per_source"),
                                                              ("eval_registry", "denominators")]:
            assert ui.cut_tables(page, web.url, asset, key) == {}, asset  # no table on the page is cut
        dialog = ui.open_markdown(page, web.url, "exclusion_masks", "rejects")
        ui.shot(page, "08-rejects-escaped")
        assert dialog.locator("code", has_text="object.__add__(self, other)").count(), "sample not shown literally"
        assert not dialog.locator("strong", has_text=re.compile(r"^add$")).count(), "a sample read as Markdown"
        ui.close_dialog(page)
        # the rendered samples' lines fit the dialog (a code block does not wrap)
        dialog = ui.open_markdown(page, web.url, "token_shards", "rendered_samples")
        wide = dialog.locator("pre").evaluate_all("ps => ps.filter(p => p.scrollWidth > p.clientWidth + 1).length")
        ui.shot(page, "09-rendered-samples")
        assert wide == 0, f"{wide} sample block(s) wider than the dialog"
        ui.close_dialog(page)

        # the schedule is visible with the config's cron
        page.goto(web.url + "/automation")
        page.get_by_text("rebuild_mix_schedule", exact=True).first.wait_for()
        page.get_by_text("Scheduled At", exact=False).first.wait_for()
        ui.shot(page, "04-automation")

        # the README's picture: the materialized graph, navigation folded away so the graph fits
        page.set_viewport_size({"width": 1440, "height": 810})
        ui.graph_node_names(page, web.url)
        ui.hide_navigation(page)
        _docs_copy(ui.shot(page, "05-asset-graph-materialized"), README_SHOT.stem)


def test_failing_gate_shows_the_failed_check_and_skipped_downstream(tmp_path):
    from playwright.sync_api import expect
    env = _env(tmp_path, {"audit": {"mask_contaminated": False}})
    graph = ui.expected_graph(env)
    if f"{GATE_ASSET}:{GATE_CHECK}" not in graph.blocking:
        pytest.skip(f"the graph has no blocking {GATE_ASSET}:{GATE_CHECK} yet (lands with the audit stage)")
    downstream = graph.all_downstream(GATE_ASSET)
    if not downstream:
        pytest.skip(f"nothing downstream of {GATE_ASSET} yet (validation_split lands with the tokens stage)")
    with ui.webserver(env, tmp_path / "dagster_home") as web, ui.browser_page(1600, 1000) as page:
        # launched from the job's page (README): a run of rebuild_mix, not a "jobless" asset run
        run_id = ui.materialize_job(page, web.url, "rebuild_mix")
        status = ui.wait_for_run(page, web.url, run_id, RUN_TIMEOUT_S)
        assert status == "Failure", f"run {run_id} ended {status} although the gate must fail"
        page.get_by_text("Run of").first.wait_for()
        assert "rebuild_mix" in page.get_by_text("Run of").first.locator("xpath=..").inner_text()
        # the summary, as the run page opens: the log is scrolled to its end, the RUN_FAILURE row
        summary = page.get_by_text(re.compile(rf"Gate {GATE_ASSET}:{GATE_CHECK} failed: kept documents still "
                                              r"overlap the eval registry")).last
        expect(summary).to_be_in_viewport(timeout=30_000)
        text = summary.inner_text()
        held = sorted(downstream)
        assert f"Held back (not run): {', '.join(held)}." in text, text
        assert f"Nothing is published at {tmp_path / 'published'} yet (no latest)." in text, text
        ui.shot(page, "10-gate-failed-summary")
        skipped = ui.not_executed_steps(page)
        ui.shot(page, "11-gate-failed-run")
        steps = {k.replace("/", "__") for k in downstream}
        # checks defined apart from their asset (@asset_check) run as their own steps: <asset>_<check>
        check_steps = {f"{k.replace('/', '__')}_{c}" for k in downstream for c in graph.checks.get(k, [])}
        assert steps <= set(skipped), f"not executed: {skipped}, downstream of the gate: {sorted(downstream)}"
        assert set(skipped) <= steps | check_steps, f"not executed but not downstream of the gate: {skipped}"

        results = ui.check_results(page, web.url, GATE_ASSET, [GATE_CHECK])
        ui.shot(page, "12-gate-failed-check")
        assert results == {GATE_CHECK: "Failed"}

        # the Runs list shows the run's user tags: the failed gate and what is still published
        page.goto(web.url + "/runs")
        page.get_by_text(f"{FAILED_GATE_TAG}: {GATE_ASSET}:{GATE_CHECK}").first.wait_for()
        page.get_by_text(f"{STILL_PUBLISHED_TAG}: none").first.wait_for()
        ui.shot(page, "14-gate-failed-runs-list")

        # docs/ui.md: the assets the gate held back, as the lineage shows them
        page.set_viewport_size({"width": 1440, "height": 810})
        shown = ui.downstream_lineage(page, web.url, GATE_ASSET)
        assert ui.missing_from_graph(shown, [GATE_ASSET, *graph.downstream[GATE_ASSET]]) == [], shown
        _docs_copy(ui.shot(page, "13-gate-failed-lineage"), "ui-gate-failed-lineage")



def test_a_config_edit_shows_exactly_the_affected_assets_unsynced(tmp_path, built_demo):
    import yaml

    # the demo over a private corpus copy, built into the webserver's instance: the session's build
    # (support/built_demo.py), restored with the on-disk instance that ran it
    built = built_demo.restore()
    home = built_demo.home
    original = yaml.safe_load(built.read_text())
    cfg = tmp_path / "mix.yaml"  # what MIX_CONFIG names: the user edits this file, then reloads
    cfg.write_text(built.read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "MIX_"))}
    env["MIX_CONFIG"] = str(cfg)
    graph = ui.expected_graph(env)
    edits = {name: (edit, readers) for name, edit, readers in unsynced.EDITS}
    with ui.webserver(env, home) as web, ui.browser_page(1440, 1000) as page:
        for step, name in enumerate(["built", "filter_threshold", "min_rows", "no_op"]):
            d = yaml.safe_load(yaml.safe_dump(original))
            edit, readers = edits.get(name, (None, set()))
            if edit is not None:
                edit(d, built.parent)  # the folder of the built config (an edit may read it or write beside it)
            cfg.write_text(yaml.safe_dump(d, sort_keys=False))
            if step:
                ui.reload_definitions(page, web.url)
            expected = set(readers).union(*(graph.all_downstream(r) for r in readers))
            on_graph = ui.unsynced_on_graph(page, web.url, graph.assets)
            ui.shot(page, f"15-unsynced-{name}")
            assert on_graph == expected, (name, sorted(on_graph), sorted(expected))
            if name == "filter_threshold":  # the case, on the asset pages either side of the edge
                edge = ["raw/stories", "contamination_report", "document_filters", "dedup_keys"]
                on_pages = ui.unsynced_on_asset_pages(page, web.url, edge)
                assert on_pages == expected & set(edge) == {"document_filters", "dedup_keys"}, (name, on_pages)
