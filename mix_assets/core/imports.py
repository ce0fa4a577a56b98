"""The package's imports, read statically from its source files (ast; nothing is imported).

`imports(root, package)` lists every import statement of every module under `root/<package>`, at module
level and inside functions, resolved to the module it loads: `from mix_assets.x import y` is module
`mix_assets.x.y` when that file exists, else the name `y` of module `mix_assets.x`. `source_version`
hashes the source of a module and of every project module it reaches through them (transitively, both
kinds): an asset's code_version (stages/common.py) so that an edit to any code the asset runs marks it
stale, without a hand-kept list. mix_assets_tests/test_imports.py checks the layering rules on the same
graph. The statements found are cached per module source (sha256) in the package's __pycache__, so a
process parses only the modules edited since (`cache_path`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "mix_assets"
ROOT = Path(__file__).resolve().parents[2]  # the directory holding the mix_assets package


@dataclass(frozen=True)
class Import:
    """One import statement's target: `importer` loads `target` (a project module's full name when it is
    one, else the name as written, e.g. `dagster` or `numpy.typing`) at `line`, inside a function or not."""

    importer: str
    target: str
    line: int
    in_function: bool


def package_modules(root: Path | None = None, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of `package` under `root` (default ROOT), by full name (a package by its `__init__.py`)."""
    return dict(_modules(ROOT if root is None else root, package))


@functools.lru_cache(maxsize=None)
def _modules(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


# Parsing every module's AST costs most of a second per process (each step process of the multiprocess
# executor, every CLI start): the statements found are cached beside the bytecode, per module name and
# sha256 of its source, before they are resolved against the package's modules (which depend on the
# other files). A missing, unreadable or foreign cache is ignored; a wrong entry cannot be hit (the key
# is the content).
CACHE_FORMAT = "mix_assets.imports/1"


def cache_path(root: Path, package: str) -> Path:
    return root / package / "__pycache__" / f"imports.{sys.implementation.cache_tag}.json"


def _statements(name: str, source: bytes, filename: str) -> list[list]:
    """The import statements of one module, unresolved: ["import", name, line, in_function] and
    ["from", absolute module, [names], line, in_function]."""
    is_package = filename.endswith("__init__.py")
    here = name if is_package else name.rpartition(".")[0]
    out: list[list] = []

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = here.split(".")
        base = base[:len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(["import", a.name, node.lineno, in_function] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append(["from", absolute(node), [a.name for a in node.names], node.lineno, in_function])
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(source, filename=filename), False)
    return out


def _resolved(name: str, statements: list[list], modules: dict[str, Path]) -> list[Import]:
    out: list[Import] = []
    for st in statements:
        if st[0] == "import":
            out.append(Import(name, st[1], st[2], st[3]))
        else:
            _, mod, names, line, in_function = st
            for a in names:
                sub = f"{mod}.{a}"
                out.append(Import(name, sub if sub in modules else mod, line, in_function))
    return list(dict.fromkeys(out))  # `from m import a, b` is one import of m


def _module_imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    return _resolved(name, _statements(name, path.read_bytes(), str(path)), modules)


def _read_cache(path: Path) -> dict:
    try:
        got = json.loads(path.read_text())
        return got["modules"] if got.get("format") == CACHE_FORMAT else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _write_cache(path: Path, entries: dict) -> None:
    try:
        path.parent.mkdir(exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump({"format": CACHE_FORMAT, "modules": entries}, fh)
        os.replace(tmp, path)
    except OSError:  # a read-only install: parse again next time
        pass


def imports(root: Path | None = None, package: str = PACKAGE) -> tuple[Import, ...]:
    """Every import statement of every module of `package` under `root` (default ROOT; read once per process)."""
    return _imports(ROOT if root is None else root, package)


@functools.lru_cache(maxsize=None)
def _imports(root: Path, package: str) -> tuple[Import, ...]:
    modules = _modules(root, package)
    where = cache_path(root, package)
    cached, entries, out = _read_cache(where), {}, []
    for name, path in modules.items():
        source = path.read_bytes()
        key = f"{name}:{hashlib.sha256(source).hexdigest()}"
        st = cached.get(key)
        try:
            got = _resolved(name, st, modules) if isinstance(st, list) else None
        except (ValueError, TypeError, IndexError):  # an entry not written by this code
            got = None
        if got is None:
            st = _statements(name, source, str(path))
            got = _resolved(name, st, modules)
        entries[key] = st
        out += got
    if entries.keys() != cached.keys():  # only this tree's modules are kept
        _write_cache(where, entries)
    return tuple(out)


def _packages(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts))]


def reached(module: str, root: Path | None = None, package: str = PACKAGE) -> list[str]:
    """`module` and every project module it imports, transitively (module level and inside functions), with
    the packages holding them (their `__init__` runs first), sorted."""
    root = ROOT if root is None else root
    modules = _modules(root, package)
    if module not in modules:
        raise KeyError(f"{module}: no such module under {root / package}")
    edges: dict[str, set[str]] = {}
    for i in _imports(root, package):
        if i.target in modules:
            edges.setdefault(i.importer, set()).add(i.target)
    seen, todo = {module}, [module]
    while todo:
        for t in edges.get(todo.pop(), ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return sorted(seen | {p for m in seen for p in _packages(m) if p in modules})


def source_version(module: str, root: Path | None = None, package: str = PACKAGE) -> str:
    """sha256 over the name and source bytes of every module `reached` from `module`: the same in every
    process for the same files wherever they are, another one after an edit (even a comment) to any of
    them. Read once per process and root: an edit made while the process runs is not seen."""
    return _source_version(module, ROOT if root is None else root, package)


@functools.lru_cache(maxsize=None)
def _source_version(module: str, root: Path, package: str) -> str:
    modules = _modules(root, package)
    h = hashlib.sha256()
    for name in reached(module, root, package):
        h.update(f"{name}\n{hashlib.sha256(modules[name].read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()
