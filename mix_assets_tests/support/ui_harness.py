"""Drive the real Dagster UI: a `dagster-webserver` on loopback against a temporary instance, and
headless Debian chromium through pip Playwright (never `playwright install`).

What the tests expect is read from the Definitions (`expected_graph`), so the browser test grows with
the graph: every asset key, every check, what lies downstream of a gate.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "test-output" / "ui"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
RUN_DONE = re.compile(r"^(Success|Failure|Canceled)$")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config_variant(base: Path, dest: Path, overrides: dict) -> Path:
    """Copy a mix config to `dest` with `overrides` merged in (nested dicts merge, the rest replaces).

    Relative paths of the original ("../build/...") are rebased onto the original's directory, so
    the variant reads the same corpus wherever it is written.
    """
    data = yaml.safe_load(base.read_text(encoding="utf-8"))

    def rebase(v):
        if isinstance(v, dict):
            return {k: rebase(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rebase(x) for x in v]
        if isinstance(v, str) and v.startswith(("../", "./")):
            return str((base.parent / v).resolve())
        return v

    def merge(a: dict, b: dict) -> dict:
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(a[k], v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
        return out

    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(yaml.safe_dump(merge(rebase(data), overrides), sort_keys=False), encoding="utf-8")
    return dest


_GRAPH_SCRIPT = """
import json, dagster as dg
from mix_assets.definitions import defs
g = defs.resolve_asset_graph()
keys = sorted(g.materializable_asset_keys, key=lambda k: k.to_user_string())
checks = {}
for ck in g.asset_check_keys:
    checks.setdefault(ck.asset_key.to_user_string(), []).append(ck.name)
out = {
  "assets": [k.to_user_string() for k in keys],
  "downstream": {k.to_user_string(): sorted(d.to_user_string() for d in g.get(k).child_keys) for k in keys},
  "checks": {k: sorted(v) for k, v in checks.items()},
  "blocking": sorted(f"{ck.asset_key.to_user_string()}:{ck.name}" for ck in g.asset_check_keys
                     if g.get_check_spec(ck).blocking),
  "jobs": sorted(n for n in defs.get_repository_def().job_names if not n.startswith("__")),
  "schedules": [{"name": s.name, "cron": s.cron_schedule} for s in defs.get_repository_def().schedule_defs],
}
print("GRAPH=" + json.dumps(out))
"""


@dataclass(frozen=True)
class Graph:
    assets: list[str]  # user strings, e.g. "raw/encyclopedia"
    downstream: dict[str, list[str]]  # direct children
    checks: dict[str, list[str]]  # asset -> check names
    blocking: list[str]  # "asset:check"
    jobs: list[str]
    schedules: list[dict]

    def all_downstream(self, key: str) -> set[str]:
        seen: set[str] = set()
        todo = list(self.downstream.get(key, []))
        while todo:
            k = todo.pop()
            if k not in seen:
                seen.add(k)
                todo.extend(self.downstream.get(k, []))
        return seen


def expected_graph(env: dict[str, str]) -> Graph:
    """The graph the webserver will show: loaded from mix_assets.definitions in a subprocess with
    the same environment (MIX_CONFIG is read at import time)."""
    p = subprocess.run([sys.executable, "-c", _GRAPH_SCRIPT], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    line = next((x for x in p.stdout.splitlines() if x.startswith("GRAPH=")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError(f"loading mix_assets.definitions failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return Graph(**json.loads(line.removeprefix("GRAPH=")))


@dataclass
class Webserver:
    url: str
    home: Path
    log: Path
    proc: subprocess.Popen


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback only
        return r.read()


def _location_loaded(url: str) -> bool:
    q = json.dumps({"query": "{ workspaceOrError { ... on Workspace { locationEntries { name "
                             "loadStatus locationOrLoadError { __typename ... on PythonError { message } } } } } }"})
    req = urllib.request.Request(url + "/graphql", data=q.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        entries = json.loads(r.read())["data"]["workspaceOrError"]["locationEntries"]
    for e in entries:
        err = e["locationOrLoadError"]
        if err and err["__typename"] == "PythonError":
            raise RuntimeError(f"code location {e['name']} failed to load: {err['message']}")
    return bool(entries) and all(e["loadStatus"] == "LOADED" for e in entries)


@contextlib.contextmanager
def webserver(env: dict[str, str], home: Path, startup_timeout: float = 240) -> Iterator[Webserver]:
    """`dagster-webserver -w workspace.yaml` on a free loopback port with DAGSTER_HOME=`home`.

    The instance launches runs directly (DefaultRunCoordinator), so no daemon is needed for the
    UI's "Materialize all"; everything else is the Dagster default (SQLite under `home`).
    """
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(
        "telemetry: {enabled: false}\n"
        "run_coordinator:\n  module: dagster.core.run_coordinator\n  class: DefaultRunCoordinator\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = home / "webserver.log"
    exe = Path(sys.executable).parent / "dagster-webserver"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(exe), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
                                cwd=REPO, env={**env, "DAGSTER_HOME": str(home)}, stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dagster-webserver exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
            with contextlib.suppress(OSError):
                _get(url + "/server_info")
                if _location_loaded(url):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"dagster-webserver not ready after {startup_timeout}s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield Webserver(url, home, log, proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)


@contextlib.contextmanager
def browser_page(width: int = 1400, height: int = 900):
    """A chromium page that dismisses the first-visit "Join the Dagster community" dialog by itself."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(60_000)
            dialog = page.get_by_text("Join the Dagster community")

            def dismiss() -> None:
                # Skip only: Escape would also close whatever menu the test has open.
                page.get_by_role("button", name="Skip").click(timeout=10_000)

            page.add_locator_handler(dialog, dismiss, no_wait_after=True)
            yield page
        finally:
            browser.close()


# -- UI steps -----------------------------------------------------------------------------------


def _display_matches(shown: str, name: str) -> bool:
    """The graph shortens long names in the middle ("contaminat…_report")."""
    if shown == name:
        return True
    if "…" in shown:
        head, _, tail = shown.partition("…")
        return name.startswith(head) and name.endswith(tail) and len(name) >= len(head) + len(tail)
    return False


def dismiss_community_dialog(page, wait_ms: int = 8_000) -> None:
    """The first visit shows a "Join the Dagster community" dialog a moment after load: skip it."""
    dialog = page.get_by_text("Join the Dagster community")
    try:
        dialog.wait_for(timeout=wait_ms)
    except Exception:
        return
    try:  # the page's locator handler may click Skip first, and then this button is gone
        page.get_by_role("button", name="Skip").click(timeout=5_000)
    except Exception:
        pass
    dialog.wait_for(state="hidden", timeout=15_000)


def graph_node_names(page, url: str) -> list[str]:
    """Open the global asset lineage with every group expanded; the names on the asset nodes."""
    page.goto(url + "/asset-groups")
    page.get_by_role("button", name="Materialize all").wait_for()
    dismiss_community_dialog(page)
    # The settings menu closes if a late dialog or re-render interrupts it: reopen and retry.
    for attempt in range(3):
        page.get_by_role("button", name="settings", exact=True).click()
        expand = page.get_by_role("menuitem", name="Expand all groups")
        if not expand.count():  # already expanded: the menu offers no "Expand"
            page.keyboard.press("Escape")
            break
        try:
            expand.click(timeout=10_000)
            break
        except Exception:
            page.keyboard.press("Escape")
            if attempt == 2:
                raise
    nodes = page.locator("[class*='AssetNode_assetName']")
    nodes.first.wait_for()
    # The graph draws only nodes inside the viewport, and none below a minimum zoom: zoom out step
    # by step while that reveals more nodes, then keep the best view.
    def read() -> list[str]:
        seen: list[str] = []
        for _ in range(20):  # the layout renders in steps: two reads 0.7 s apart must agree
            page.wait_for_timeout(700)
            now = sorted(t.strip() for t in nodes.all_inner_texts())
            if now == seen:
                break
            seen = now
        return seen

    best = read()
    zoom_out = page.locator("button:has([aria-label='zoom_out'])").first
    zoom_in = page.locator("button:has([aria-label='zoom_in'])").first
    for _ in range(6):
        if not zoom_out.count() or zoom_out.is_disabled():
            break
        zoom_out.click()
        now = read()
        if len(now) <= len(best):
            if not now:
                zoom_in.click()
                read()
            break
        best = now
    seen = best
    return seen


def hide_navigation(page) -> None:
    """Fold Dagster's left navigation (remembered by the browser) and reload so the graph refits."""
    button = page.get_by_role("button", name="Hide navigation")
    if button.count():
        button.click()
    page.reload()
    page.get_by_role("button", name="Materialize all").wait_for()
    page.locator("[class*='AssetNode_assetName']").first.wait_for()
    page.wait_for_timeout(1500)


def missing_from_graph(shown: list[str], expected_keys: list[str]) -> list[str]:
    """Expected keys with no node on the graph (a node shows the last component of its key)."""
    return [k for k in expected_keys if not any(_display_matches(s, k.split("/")[-1]) for s in shown)]


def materialize_all(page, url: str) -> str:
    """Click "Materialize all" on the lineage page; the run id from the launch toast."""
    page.goto(url + "/asset-groups")
    page.get_by_role("button", name="Materialize all").click()
    link = page.locator("a[href*='/runs/']").first
    link.wait_for(timeout=60_000)
    return link.get_attribute("href").rsplit("/", 1)[-1]


def materialize_job(page, url: str, job: str, location: str = "mix_assets") -> str:
    """Jobs -> `job` -> "Materialize all" (a run of that job, not of the hidden asset job); the run id."""
    page.goto(f"{url}/locations/{location}/jobs/{job}")
    page.get_by_role("button", name="Materialize all").click()
    link = page.locator("a[href*='/runs/']").first
    link.wait_for(timeout=60_000)
    return link.get_attribute("href").rsplit("/", 1)[-1]


def wait_for_run(page, url: str, run_id: str, timeout_s: float) -> str:
    """Open the run page and wait until its status tag reads Success, Failure or Canceled."""
    page.goto(f"{url}/runs/{run_id}")
    tag = page.get_by_text(RUN_DONE).first
    tag.wait_for(timeout=timeout_s * 1000)
    return tag.inner_text().strip()


def not_executed_steps(page) -> list[str]:
    """On a run page: expand the "Not executed (N)" section; the step keys listed there."""
    header = page.get_by_text(re.compile(r"^Not executed \(\d+\)$")).first
    n = int(re.search(r"\d+", header.inner_text()).group())
    if n == 0:
        return []
    header.click()
    section = header.locator("xpath=../..")
    page.wait_for_timeout(500)
    return [s for s in section.inner_text().splitlines()[1:] if s.strip()][:n]


def check_results(page, url: str, asset: str, checks: list[str]) -> dict[str, str]:
    """The asset's Checks tab, one check at a time (`checkDetail=`): its "Evaluation result"
    (Passed, Failed, Execution failed, ...), cross-checked with the status in the list on the left."""
    out = {}
    for name in checks:
        page.goto(f"{url}/assets/{asset}?view=checks&checkDetail={name}")
        label = page.get_by_text("Evaluation result", exact=True)
        label.wait_for()
        lines = [x for x in label.locator("xpath=..").inner_text().splitlines() if x.strip()]
        detail = lines[1] if len(lines) > 1 else ""
        # the list on the left shows "<name>\n<Succeeded|Failed|...>" (long names middle-truncated)
        statuses = {"Succeeded", "Failed", "Warning", "Execution failed", "Not evaluated"}
        listed = [t.splitlines()[-1].strip() for t in page.locator("text=" + name[:12]).locator("xpath=../..")
                  .all_inner_texts() if t.splitlines() and t.splitlines()[-1].strip() in statuses]
        agree = {"Passed": "Succeeded", "Failed": "Failed"}
        if detail in agree and listed and agree[detail] not in listed:
            raise AssertionError(f"{asset}:{name}: detail says {detail}, the check list says {listed}")
        out[name] = detail
    return out


def shot(page, name: str) -> Path:
    """A screenshot under test-output/ui/ (gitignored)."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def save_small_png(src: Path, dest: Path, colors: int = 64) -> Path:
    """A palette-quantized copy of a screenshot (UI screenshots are flat colours: ~3x smaller)."""
    from PIL import Image

    dest.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(src) as im:
        im.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT).save(dest, optimize=True)
    return dest


def failure_reason(home: Path, run_id: str) -> str:
    """Each failed step of a run with the root cause of its error, read from the instance at `home`."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        out = []
        for r in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
            err = r.dagster_event.step_failure_data.error
            while err is not None and err.cause is not None:
                err = err.cause
            out.append(f"{r.step_key}: {err.message.strip()[-600:] if err else r.message}")
        return " | ".join(out or ["no step failed"])
    finally:
        instance.dispose()


def chart_entries(home: Path) -> dict[str, list[str]]:
    """Assets whose latest materialization carries a chart (markdown with an inline PNG): asset -> keys."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(home))
    try:
        out: dict[str, list[str]] = {}
        for key in instance.get_asset_keys():
            ev = instance.get_latest_materialization_event(key)
            meta = ev.asset_materialization.metadata if ev and ev.asset_materialization else {}
            keys = [k for k, v in meta.items()
                    if isinstance(v, dg.MarkdownMetadataValue) and "data:image/png;base64," in (v.md_str or "")]
            if keys:
                out[key.to_user_string()] = keys
        return out
    finally:
        instance.dispose()


def open_chart(page, url: str, asset: str, key: str) -> tuple[int, int]:
    """The asset's page with the metadata entry `key` opened ("[Show Markdown]"): the chart's
    (natural width, width shown) in pixels. Close it with `close_dialog`."""
    page.goto(f"{url}/assets/{asset}")
    row = page.locator("tr").filter(has=page.get_by_text(key, exact=True)).first
    row.get_by_text("Show Markdown").click()
    img = page.get_by_role("dialog").locator("img[src^='data:image/png']").last
    img.wait_for()
    page.wait_for_function("e => e.complete && e.naturalWidth > 0", arg=img.element_handle())
    natural, shown = img.evaluate("e => [e.naturalWidth, e.clientWidth]")
    img.scroll_into_view_if_needed()
    return natural, shown


_SHOWN_JS = """e => {
  // inside the viewport and every ancestor that clips (overflow other than visible) or scrolls
  const r = e.getBoundingClientRect();
  let left = 0, right = window.innerWidth;
  for (let a = e.parentElement; a; a = a.parentElement) {
    if (getComputedStyle(a).overflowX !== 'visible') {
      const b = a.getBoundingClientRect();
      left = Math.max(left, b.left); right = Math.min(right, b.right);
    }
  }
  return r.width > 0 && r.left >= left - 1 && r.right <= right + 1;
}"""


def metadata_row(page, url: str, asset: str, key: str):
    """The asset's page (latest materialization): the metadata table's row of entry `key`."""
    page.goto(f"{url}/assets/{asset}")
    row = page.locator("tr").filter(has=page.get_by_text(key, exact=True)).first
    row.wait_for()
    return row


def table_columns_shown(page, url: str, asset: str, key: str) -> dict[str, bool]:
    """A table metadata entry as the asset's page shows it: {column: whether its header is visible},
    i.e. inside the viewport and not cut off by a clipping or scrolled container."""
    row = metadata_row(page, url, asset, key)
    heads = row.locator("table th")
    heads.first.wait_for()
    row.scroll_into_view_if_needed()  # vertically, for the screenshot: the columns' clipping is horizontal
    return {h.inner_text().strip(): h.evaluate(_SHOWN_JS) for h in heads.all()}


_CUT_JS = """() => {
  const shown = """ + _SHOWN_JS + """;
  const out = {};
  for (const th of document.querySelectorAll('td table th')) {  // a table inside a metadata value
    if (shown(th)) continue;
    const row = th.closest('table').parentElement.closest('tr');
    const key = row && row.querySelector('td') ? row.querySelector('td').innerText.trim() : '?';
    (out[key] = out[key] || []).push(th.innerText.trim());
  }
  return out;
}"""


def cut_tables(page, url: str, asset: str, key: str) -> dict[str, list[str]]:
    """The asset's page (latest materialization), once entry `key` is shown: {metadata key: the columns of
    its table the page cuts off}, for every table entry and inline Markdown table."""
    metadata_row(page, url, asset, key)
    page.wait_for_timeout(500)
    return page.evaluate(_CUT_JS)


def open_markdown(page, url: str, asset: str, key: str):
    """The asset's metadata entry `key` opened ("[Show Markdown]"): the dialog. Close it with `close_dialog`."""
    metadata_row(page, url, asset, key).get_by_text("Show Markdown").click()
    dialog = page.get_by_role("dialog")
    dialog.locator("p, table, pre").first.wait_for()
    return dialog


def close_dialog(page) -> None:
    page.get_by_role("dialog").get_by_role("button", name="Close").click()
    page.get_by_role("dialog").wait_for(state="hidden")


def downstream_lineage(page, url: str, asset: str, depth: int = 1, zoom_steps: int = 2) -> list[str]:
    """The asset's Lineage tab, downstream `depth` levels, zoomed in until the nodes show their
    status rows (latest event, checks); the names on the nodes."""
    page.goto(f"{url}/assets/{asset}?view=lineage&lineageScope=downstream&lineageDepth={depth}")
    nodes = page.locator("[class*='AssetNode_assetName']")
    nodes.first.wait_for()
    page.wait_for_timeout(1500)
    zoom_in = page.locator("button:has([aria-label='zoom_in'])").first
    for _ in range(zoom_steps):
        if zoom_in.count() and zoom_in.is_enabled():
            zoom_in.click()
            page.wait_for_timeout(700)
    page.get_by_text("Latest event").first.wait_for()
    # the nodes fill their status rows asynchronously: let "Loading..." go before a screenshot (which is
    # documentation only: a UI still loading after 20 s is not a failure of the graph)
    with contextlib.suppress(Exception):
        page.get_by_text("Loading...").first.wait_for(state="hidden", timeout=20_000)
    return sorted(t.strip() for t in nodes.all_inner_texts())


# -- Unsynced (stale) assets, as the UI marks them ------------------------------------------------

_STALE_NODES_JS = """() => Array.from(document.querySelectorAll("[class*='AssetNode_minimalAssetNodeBox']")).map(box => {
  const name = box.querySelector("[class*='AssetNode_assetName']");
  return [name ? name.innerText.trim() : '', !!box.querySelector("[class*='minimalNodeStaleDot']")];
})"""


def unsynced_on_graph(page, url: str, assets: list[str]) -> set[str]:
    """The global lineage, every group expanded (`graph_node_names`): the assets whose node carries the
    Unsynced dot (Dagster's stale marker on a zoomed-out node), once the page's queries have settled."""
    shown = graph_node_names(page, url)
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1000)
    nodes = page.evaluate(_STALE_NODES_JS)
    if missing_from_graph([n for n, _ in nodes], assets):
        raise AssertionError(f"the graph shows {shown}, not every asset of {assets}")
    return {a for a in assets for n, stale in nodes if stale and _display_matches(n, a.split("/")[-1])}


def unsynced_on_asset_pages(page, url: str, assets: list[str]) -> set[str]:
    """Each asset's own page: the assets whose header carries the "Unsynced" tag (read once the page's
    queries have settled: the tag comes after the rest of the header)."""
    out = set()
    for asset in assets:
        page.goto(f"{url}/assets/{asset}", wait_until="networkidle")
        page.get_by_text("Latest materialization").first.wait_for()
        page.wait_for_load_state("networkidle")
        if page.locator("text=/^Unsynced( \\(\\d+\\))?$/").count():
            out.add(asset)
    return out


def reload_definitions(page, url: str, timeout_s: float = 240) -> None:
    """Click "Reload definitions" (the catalog's button, as a user does after editing the config) and wait
    until the code location has loaded again."""
    before = _location_updated(url)
    page.goto(url + "/assets")
    dismiss_community_dialog(page, wait_ms=3_000)
    page.get_by_role("button", name="Reload definitions").click()
    deadline = time.monotonic() + timeout_s
    while not (_location_updated(url) > before and _location_loaded(url)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the code location did not reload within {timeout_s}s")
        time.sleep(1)


def _location_updated(url: str) -> float:
    """The latest `updatedTimestamp` of the workspace's code locations (moves when one reloads)."""
    q = json.dumps({"query": "{ workspaceOrError { ... on Workspace { locationEntries { updatedTimestamp } } } }"})
    req = urllib.request.Request(url + "/graphql", data=q.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        entries = json.loads(r.read())["data"]["workspaceOrError"]["locationEntries"]
    return max((float(e["updatedTimestamp"]) for e in entries), default=0.0)
