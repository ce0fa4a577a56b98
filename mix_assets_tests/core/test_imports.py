"""core/imports.py: imports read statically, what a module reaches, the hash of that code."""

from pathlib import Path

from mix_assets.core import imports


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, src in files.items():
        path = root / "mix_assets" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(src)
    return root


def test_reached_follows_both_kinds_of_from_import_and_imports_in_functions(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "", "stages/__init__.py": "", "stages/tokens/__init__.py": "", "core/__init__.py": "",
        "stages/tokens/assets.py": "from mix_assets.stages.tokens import shards\n",  # a module
        "stages/tokens/shards.py": "import numpy\nfrom mix_assets.core.tables import write\n",  # a name in a module
        "core/tables.py": "def write():\n    from mix_assets.core import kernels\n",  # inside a function
        "core/kernels.py": "",
        "core/unused.py": "",
        "reader.py": "from mix_assets.core import tables\n",  # imports the stage's code; not imported by it
    })
    assert imports.reached("mix_assets.stages.tokens.assets", root) == [
        "mix_assets", "mix_assets.core", "mix_assets.core.kernels", "mix_assets.core.tables", "mix_assets.stages",
        "mix_assets.stages.tokens", "mix_assets.stages.tokens.assets", "mix_assets.stages.tokens.shards"]
    got = {(i.importer, i.target, i.in_function) for i in imports.imports(root)}
    assert ("mix_assets.stages.tokens.shards", "numpy", False) in got
    assert ("mix_assets.core.tables", "mix_assets.core.kernels", True) in got


def test_source_version_changes_with_any_reached_file_and_only_those(tmp_path):
    files = {"__init__.py": "", "a.py": "from mix_assets import b\n", "b.py": "x = 1\n", "c.py": "y = 2\n"}
    roots = {n: _package(tmp_path / n, files) for n in ("same", "b", "c")}
    (roots["b"] / "mix_assets" / "b.py").write_text("x = 1  # a comment\n")
    (roots["c"] / "mix_assets" / "c.py").write_text("y = 3\n")
    v = {n: imports.source_version("mix_assets.a", r) for n, r in roots.items()}
    assert v["same"] == imports.source_version("mix_assets.a", _package(tmp_path / "again", files))
    assert v["b"] != v["same"] and v["c"] == v["same"]
