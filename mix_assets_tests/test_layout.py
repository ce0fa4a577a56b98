"""The code's shape, checked: a docstring on every module and package, thin asset and check bodies, one way to
reach the resource."""

import ast
from pathlib import Path

import mix_assets

PACKAGE = Path(mix_assets.__file__).parent
MAX_BODY_LINES = 40
DECORATORS = {"asset", "multi_asset", "asset_check", "multi_asset_check", "op"}


def _decorator_name(d: ast.expr) -> str:
    target = d.func if isinstance(d, ast.Call) else d
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def _body_lines(fn: ast.FunctionDef) -> int:
    """Lines of the function body below its signature, docstring included."""
    return fn.body[-1].end_lineno - fn.body[0].lineno + 1


def decorated_functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_decorator_name(d) in DECORATORS for d in node.decorator_list):
                yield node


def test_every_module_and_package_says_what_it_holds():
    """A docstring on every module, and on every package's __init__.py (stages/<stage>/ says which file
    is which)."""
    bare = [str(p.relative_to(PACKAGE.parent)) for p in sorted(PACKAGE.rglob("*.py"))
            if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert not bare, f"modules without a docstring: {bare}"


def test_every_asset_and_check_body_is_at_most_40_lines():
    fat, seen = [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        for fn in decorated_functions(ast.parse(path.read_text(), str(path))):
            seen += 1
            if _body_lines(fn) > MAX_BODY_LINES:
                fat.append(f"{path.relative_to(PACKAGE.parent)}:{fn.lineno} {fn.name}: {_body_lines(fn)} lines")
    assert seen >= 15, f"only {seen} asset/check functions found: is the decorator list out of date?"
    assert not fat, "asset/check bodies over 40 lines (move the work into the stage's logic, metadata into its metadata.py):\n" + \
        "\n".join(fat)


def test_no_required_resource_keys():
    """Assets and checks take `mix: MixResource` as a typed parameter, never `context.resources`."""
    hits = [f"{p.relative_to(PACKAGE.parent)}:{i}" for p in sorted(PACKAGE.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if "required_resource_keys" in line or "context.resources" in line]
    assert not hits, hits


def test_the_body_counter_sees_a_fat_body(tmp_path):
    src = "import dagster as dg\n@dg.asset\ndef a():\n" + "    x = 1\n" * 41
    (fn,) = decorated_functions(ast.parse(src))
    assert _body_lines(fn) == 41


def test_every_step_that_returns_a_gate_is_gated():
    """A step whose result goes through `gate()` must be `@gated`, or a failed gate fails its run with
    Dagster's generic message instead of the summary (which gate, why, held back, still published)."""
    missing, gating = [], 0
    for p in sorted(PACKAGE.rglob("*.py")):
        for fn in decorated_functions(ast.parse(p.read_text())):
            calls = {_decorator_name(n) for n in ast.walk(fn) if isinstance(n, ast.Call)}
            if "gate" in calls:
                gating += 1
                if "gated" not in {_decorator_name(d) for d in fn.decorator_list}:
                    missing.append(f"{p.relative_to(PACKAGE)}:{fn.name}")
    assert gating >= 10, f"only {gating} steps call gate(): is the search looking in the right place?"
    assert not missing, missing
