"""The package's imports, read statically from its source files (ast; nothing is imported).

`imports(root, package)` lists every import statement of every module under `root/<package>`, at module
level and inside functions, resolved to the module it loads: `from mix_assets.x import y` is module
`mix_assets.x.y` when that file exists, else the name `y` of module `mix_assets.x`. `source_version`
hashes the source of a module and of every project module it reaches through them (transitively, both
kinds): an asset's code_version (stages/common.py) so that an edit to any code the asset runs marks it
stale, without a hand-kept list. mix_assets_tests/test_imports.py checks the layering rules on the same
graph.
"""

from __future__ import annotations

import ast
import functools
import hashlib
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


def _module_imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    out: list[Import] = []

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = here.split(".")
        base = base[:len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, ast.Import):
            out.extend(Import(name, a.name, node.lineno, in_function) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = absolute(node)
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append(Import(name, sub if sub in modules else mod, node.lineno, in_function))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_bytes(), filename=str(path)), False)
    return list(dict.fromkeys(out))  # `from m import a, b` is one import of m


def imports(root: Path | None = None, package: str = PACKAGE) -> tuple[Import, ...]:
    """Every import statement of every module of `package` under `root` (default ROOT; read once per process)."""
    return _imports(ROOT if root is None else root, package)


@functools.lru_cache(maxsize=None)
def _imports(root: Path, package: str) -> tuple[Import, ...]:
    modules = _modules(root, package)
    return tuple(i for name, path in modules.items() for i in _module_imports(name, path, modules))


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
