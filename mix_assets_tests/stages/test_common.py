"""stages/common.py: what every materialisation carries besides the stage's own metadata, and code versions."""

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.core import imports
from mix_assets.definitions import build_definitions
from mix_assets.stages.common import code_version, with_lineage


def _vm_hwm_mb() -> float:
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1e3


def test_with_lineage_carries_the_process_peak_rss():
    lin = {"metadata": {"computed_from": dg.MetadataValue.json({})}, "data_version": dg.DataVersion("v")}
    big = b"\x01" * 200_000_000  # written, so resident
    res = with_lineage({"docs": 3}, lin)
    del big
    peak = res.metadata["peak_rss_mb"]
    assert peak >= 200 and abs(peak - _vm_hwm_mb()) < 5, (peak, _vm_hwm_mb())
    assert res.metadata["docs"] == 3 and "computed_from" in res.metadata


# -- code_version: derived from the asset module's imports, plus the config it reads ---------------
TOKENS = "mix_assets.stages.tokens.assets"
DEMO = REPO_ROOT / "configs" / "demo.yaml"


def _code_versions() -> dict[str, str]:
    graph = build_definitions(load_spec(DEMO)).resolve_asset_graph()
    return {k.to_user_string(): graph.get(k).code_version for k in graph.get_all_asset_keys()}


def _copy_package(dst: Path) -> Path:
    shutil.copytree(imports.ROOT / "mix_assets", dst / "mix_assets", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def test_an_edit_to_a_core_module_the_token_stage_imports_changes_token_shards_code_version(tmp_path, monkeypatch):
    """core/tables.py is reached from stages/tokens/assets.py only through other modules (shards, packing,
    ...): a comment added to it marks token_shards stale; one added to the reader, which the token stage
    never imports, does not mark dedup_keys (nothing on its chain imports it), but marks token_shards through
    contamination_report upstream (versions chain: stages/common.chain_code_versions). Each edit is in its own copy of the package (versions are read once per root)."""
    roots = {name: _copy_package(tmp_path / name) for name in ("copy", "tables", "reader")}
    with open(roots["tables"] / "mix_assets" / "core" / "tables.py", "a") as f:
        f.write("# an edit\n")
    with open(roots["reader"] / "mix_assets" / "reader" / "__init__.py", "a") as f:
        f.write("# an edit\n")
    here = _code_versions()
    seen = {}
    for name, root in roots.items():
        monkeypatch.setattr(imports, "ROOT", root)
        seen[name] = _code_versions()
    assert seen["copy"] == here  # the same files elsewhere: the same versions (no path in them)
    assert seen["tables"]["token_shards"] != here["token_shards"]
    assert seen["tables"]["tokenizer"] != here["tokenizer"]  # the same module: its assets share the code
    # nothing upstream of dedup_keys reaches the reader; token_shards' chain does (contamination_report's code)
    assert seen["reader"]["dedup_keys"] == here["dedup_keys"]
    assert seen["reader"]["token_shards"] != here["token_shards"]
    assert seen["reader"]["manifest"] != here["manifest"]  # the manifest's checks read it back through the reader
    reached = imports.reached(TOKENS)
    assert "mix_assets.core.tables" in reached and not any(m.startswith("mix_assets.reader") for m in reached)


def test_code_versions_are_the_same_in_another_process():
    """The hash of the sources and of the config values' repr, nothing of the process (not its hash seed)."""
    script = ("import json; from mix_assets_tests.stages.test_common import _code_versions; "
              "print(json.dumps(_code_versions()))")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == _code_versions()


def test_code_version_takes_config_not_code():
    """The code is derived; a module or function passed as a part (the old hand-kept list) is refused."""
    assert code_version(TOKENS, {"a": 1}) == code_version(TOKENS, {"a": 1}) != code_version(TOKENS, {"a": 2})
    with pytest.raises(TypeError, match="derived from the module's imports"):
        code_version(TOKENS, imports)


def hand_listed_code(source: str) -> list[int]:
    """Lines of `code_version(...)` calls that name code by hand: a first argument other than `__name__`
    (another module's source standing for the asset's), or a string naming a project module or file."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "code_version":
            first = node.args[0] if node.args else None
            named = [a.value for a in ast.walk(node) if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and (a.value.startswith("mix_assets.") or a.value.endswith(".py"))]
            if not (isinstance(first, ast.Name) and first.id == "__name__") or named:
                bad.append(node.lineno)
    return bad


def test_no_code_version_call_lists_modules_by_hand():
    src = ('a = code_version(__name__, spec.seed)\nb = code_version("mix_assets.stages.tokens.shards", s)\n'
           'c = code_version(__name__, "mix_assets.core.tables")\nd = common.code_version(__name__, "engine.py")\n')
    assert hand_listed_code(src) == [2, 3, 4]
    pkg = Path(imports.ROOT) / "mix_assets"
    found = [f"{p.relative_to(pkg)}:{line}" for p in sorted(pkg.rglob("*.py")) if p.name != "common.py"
             for line in hand_listed_code(p.read_text())]
    calls = sum(p.read_text().count("code_version(__name__") for p in pkg.glob("stages/*/assets.py"))
    assert calls >= 8, calls  # the scan reads the asset modules
    assert found == [], f"code_version(__name__, <config values>) only; code is derived from the imports: {found}"


def test_chained_code_versions_move_with_every_asset_upstream_and_nothing_else():
    """chain_code_versions: a root keeps its own version; an edit of one asset's own version moves its
    and every descendant's, nothing upstream or beside it; checks pass through unchanged."""
    import dagster as dg

    from mix_assets.stages.common import chain_code_versions

    def build(own: dict) -> dict[str, str]:
        @dg.asset(code_version=own["a"])
        def a(): ...

        @dg.asset(code_version=own["b"], deps=[a])
        def b(): ...

        @dg.asset(code_version=own["c"], deps=[b])
        def c(): ...

        @dg.asset(code_version=own["d"], deps=[a])
        def d(): ...

        @dg.asset_check(asset=c)
        def c_ok() -> dg.AssetCheckResult:
            return dg.AssetCheckResult(passed=True)

        out = chain_code_versions([a, b, c, d, c_ok])
        assert out[-1] is c_ok
        return {k.to_user_string(): v for x in out[:-1] for k, v in x.code_versions_by_key.items()}

    base = {"a": "1", "b": "2", "c": "3", "d": "4"}
    now = build(base)
    assert now["a"] == "1" and len({now["b"], now["c"], now["d"]}) == 3
    changed = lambda edit: {k for k, v in build({**base, **edit}).items() if v != now[k]}  # noqa: E731
    assert changed({"a": "5"}) == {"a", "b", "c", "d"}
    assert changed({"b": "5"}) == {"b", "c"}
    assert changed({"c": "5"}) == {"c"}
    assert changed({}) == set()
