"""The format package sits below the stages: it imports the core and itself, never a stage, the reader or
Dagster, at module level or inside a function (the card and the split rule it checks live below it)."""

import ast
from pathlib import Path

import mix_assets

FORMAT = Path(mix_assets.__file__).parent / "format"
ALLOWED = ("mix_assets.core.", "mix_assets.format.")


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def test_format_imports_no_stage_reader_or_dagster():
    found = [f"{p.relative_to(FORMAT.parent)}:{line}: {mod}"
             for p in sorted(FORMAT.rglob("*.py")) for line, mod in _imports(p)
             if (mod.startswith("mix_assets") and not (mod + ".").startswith(ALLOWED)) or mod.split(".")[0] == "dagster"]
    assert found == []
