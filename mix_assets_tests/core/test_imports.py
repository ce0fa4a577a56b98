"""core/imports.py: imports read statically, what a module reaches, the hash of that code."""

import json
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


def _fresh(root: Path) -> set:
    imports._imports.cache_clear()
    imports._modules.cache_clear()
    return {(i.importer, i.target, i.line, i.in_function) for i in imports.imports(root)}


def test_the_parse_cache_is_hit_for_unchanged_modules_and_missed_for_an_edited_one(tmp_path, monkeypatch):
    root = _package(tmp_path, {"__init__.py": "", "a.py": "from mix_assets import b\n", "b.py": "import numpy\n",
                               "c.py": "def f():\n    from mix_assets import a\n"})
    first = _fresh(root)
    assert imports.cache_path(root, "mix_assets").exists()
    parsed: list[str] = []
    real = imports._statements

    def counted(name, source, filename):
        parsed.append(name)
        return real(name, source, filename)

    monkeypatch.setattr(imports, "_statements", counted)
    assert _fresh(root) == first and parsed == []  # every module from the cache
    (root / "mix_assets" / "b.py").write_text("import numpy\nfrom mix_assets import c\n")
    got = _fresh(root)
    assert parsed == ["mix_assets.b"]  # only the edited module parsed again
    assert ("mix_assets.b", "mix_assets.c", 2, False) in got and got - first == {("mix_assets.b", "mix_assets.c", 2, False)}
    parsed.clear()
    assert _fresh(root) == got and parsed == []


def _poisoned(root: Path) -> str:
    """Entries under the right keys that this code did not write."""
    entries = json.loads(imports.cache_path(root, "mix_assets").read_text())["modules"]
    return json.dumps({"format": imports.CACHE_FORMAT, "modules": {k: [["from", 1]] for k in entries}})


def test_a_damaged_or_foreign_parse_cache_is_ignored(tmp_path):
    root = _package(tmp_path, {"__init__.py": "", "a.py": "from mix_assets import b\n", "b.py": ""})
    want = _fresh(root)
    cache = imports.cache_path(root, "mix_assets")
    for text in ("{not json", '{"format": "other", "modules": {}}', '[1, 2]', '{"format": "%s", "modules": '
                 '{"mix_assets.a:0": 5}}' % imports.CACHE_FORMAT, _poisoned(root)):
        cache.write_text(text)
        assert _fresh(root) == want, text
    _fresh(root)
    assert '"mix_assets.a:' in cache.read_text()  # rewritten whole
