"""The package's layering, checked on its imports read statically (core/imports.py: ast, nothing imported).

Rules (each failure names the modules and the chain of imports, with lines):
  * no cycle among mix_assets modules at module level;
  * the core (mix_assets.core) reaches no stage, no config and no console module;
  * the core, the format package and the reader reach no stage and import no dagster (dagster_*);
  * a stage's logic modules (stages/<stage>/*.py but assets, config, metadata) import no config;
  * no mix_assets module is imported inside a function (to dodge a cycle), but the few in
    LAZY_IMPORTS, each for an optional or heavy dependency;
  * no module re-exports a project name (imports it at module level and never uses it), but the
    public faces in PUBLIC_FACES (mix_assets.reader).
"Reach" follows imports transitively, module level and inside functions alike: the code that runs.
Each rule is also run on a small package written to tmp_path, to see it fail.
"""

from __future__ import annotations

import ast
import textwrap
from collections import deque
from pathlib import Path

import pytest

from mix_assets.core import imports as im

# project modules that may be imported inside a function, and why
LAZY_IMPORTS = {
    "mix_assets.core.kernels_jit": "loads numba (~150 MB resident, ~0.5 s): only in processes that run a compiled kernel",
    "mix_assets.stages.lines.kernels": "loads numba (through core.kernels_jit): only in processes that run line_dedup",
    "mix_assets.stages.audit.kernels": "loads numba: only in processes that run the fuzzy advisory's scan",
    "mix_assets.stages.quality.predict": "loads numba: only in processes that score documents with the classifier",
    "mix_assets.ray_engine": "imports ray and dagster-ray (optional): only for the engine kind 'ray'",
    # the trainer's reader imports format's checker; these load pyarrow, which only the checks of the
    # review files and of a scrub manifest need (test_the_reader_loads_no_pyarrow_nor_dagster pins it)
    "mix_assets.core.pii": "pyarrow: only the scrub-manifest check of a mix that scrubs needs it",
    "mix_assets.core.tables": "pyarrow: only the review-count check needs it",
    "mix_assets.core.idset": "pyarrow: only the review-count check needs it",
}
STAGE_EDGE_MODULES = {"assets", "config", "metadata"}  # a stage's modules that may read the config


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_dagster(name: str) -> bool:
    top = name.split(".")[0]
    return top == "dagster" or top.startswith("dagster_")


class Graph:
    """The project imports of one package: edges (module level only, or all) with their statements."""

    def __init__(self, root: Path, package: str = im.PACKAGE):
        self.package = package
        self.paths = im.package_modules(root, package)
        self.modules = set(self.paths)
        self.imports = im.imports(root, package)
        self.edges: dict[str, list[im.Import]] = {}
        self.module_edges: dict[str, list[im.Import]] = {}
        for i in self.imports:
            if i.target in self.modules and i.target != i.importer:
                self.edges.setdefault(i.importer, []).append(i)
                if not i.in_function:
                    self.module_edges.setdefault(i.importer, []).append(i)

    def paths_from(self, start: str, edges: dict[str, list[im.Import]]) -> dict[str, list[im.Import]]:
        """Every module reached from `start`, with a shortest chain of imports to it."""
        chains: dict[str, list[im.Import]] = {start: []}
        todo = deque([start])
        while todo:
            m = todo.popleft()
            for i in edges.get(m, ()):
                if i.target not in chains:
                    chains[i.target] = chains[m] + [i]
                    todo.append(i.target)
        return chains


def _chain(start: str, steps: list[im.Import]) -> str:
    out = start
    for i in steps:
        out += f" -({i.line}{', in a function' if i.in_function else ''})-> {i.target}"
    return out


def _p(g: Graph, sub: str) -> str:
    return f"{g.package}.{sub}"


def cycles(g: Graph) -> list[str]:
    """Each module-level cycle once: per module, the shortest cycle back to it (rotations dropped)."""
    out, seen = [], set()
    for m in sorted(g.modules):
        best = None
        for first in g.module_edges.get(m, ()):
            back = g.paths_from(first.target, g.module_edges).get(m)
            if back is not None and (best is None or len(back) + 1 < len(best)):
                best = [first, *back]
        if best is None:
            continue
        members = frozenset(i.importer for i in best)
        if members not in seen:
            seen.add(members)
            out.append(f"import cycle among {', '.join(sorted(members))}: {_chain(m, best)}")
    return out


def core_reaches_the_spec(g: Graph) -> list[str]:
    """The core reaches no stage, no config, no console module."""
    banned = (_p(g, "stages"), _p(g, "config"), _p(g, "console"))
    return _reaches(g, (_p(g, "core"),), banned, "the core")


def core_format_reader_reach_a_stage(g: Graph) -> list[str]:
    roots = (_p(g, "core"), _p(g, "format"), _p(g, "reader"))
    return _reaches(g, roots, (_p(g, "stages"),), "the core, format and reader")


def core_format_reader_import_dagster(g: Graph) -> list[str]:
    out = []
    for m in sorted(x for x in g.modules if _under(x, _p(g, "core"), _p(g, "format"), _p(g, "reader"))):
        for reached, steps in sorted(g.paths_from(m, g.edges).items()):
            for i in g.imports:
                if i.importer == reached and _is_dagster(i.target):
                    out.append(f"{m} imports dagster ({i.target}; the core, format and reader must not): "
                               f"{_chain(m, steps)} -({i.line}{', in a function' if i.in_function else ''})-> {i.target}")
    return out


def _reaches(g: Graph, roots: tuple[str, ...], banned: tuple[str, ...], who: str) -> list[str]:
    out = []
    for m in sorted(x for x in g.modules if _under(x, *roots)):
        for reached, steps in sorted(g.paths_from(m, g.edges).items()):
            if steps and _under(reached, *banned) and not _under(steps[-1].importer, *banned):  # the first one only
                out.append(f"{m} reaches {reached} ({who} must not import {', '.join(banned)}): {_chain(m, steps)}")
    return out


def stage_logic_imports_config(g: Graph) -> list[str]:
    out = []
    for i in g.imports:
        parts = i.importer.split(".")
        # stages.<stage>.<module>, or deeper (stages.filters.rules.c4): logic unless an edge module
        logic = len(parts) >= 4 and parts[1] == "stages" and parts[3] not in STAGE_EDGE_MODULES
        if logic and _under(i.target, _p(g, "config")):
            out.append(f"{i.importer} imports {i.target} at line {i.line}: a stage's logic takes its config "
                       f"section as an argument (only its {', '.join(sorted(STAGE_EDGE_MODULES))} modules import config)")
    return out


def imports_in_functions(g: Graph) -> list[str]:
    lazy = {_p(g, k.removeprefix(im.PACKAGE + ".")) for k in LAZY_IMPORTS}
    return [f"{i.importer} imports {i.target} inside a function at line {i.line}: import it at module level "
            f"(a cycle it dodges must be cut instead); only {', '.join(sorted(lazy))} may be imported lazily"
            for i in g.imports if i.in_function and i.target in g.modules and i.target not in lazy]


PUBLIC_FACES = {"reader"}  # packages whose __init__ gathers their modules' public names for callers


def re_exports(g: Graph) -> list[str]:
    """A project name imported at module level and never used there is only passed on to the module's
    importers (a re-export or a compatibility shim): they must import it from where it is defined."""
    faces = {_p(g, f) for f in PUBLIC_FACES}
    out = []
    for name, path in sorted(g.paths.items()):
        if name in faces:
            continue
        tree = ast.parse(path.read_bytes(), filename=str(path))
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == g.package):
                out += [f"{name} imports {a.asname or a.name} from {node.module or '.'} at line {node.lineno} and "
                        "never uses it (a re-export: import it from its own module)"
                        for a in node.names if (a.asname or a.name) not in used]
    return out


RULES = [cycles, core_reaches_the_spec, core_format_reader_reach_a_stage, core_format_reader_import_dagster,
         stage_logic_imports_config, imports_in_functions, re_exports]


@pytest.fixture(scope="module")
def package() -> Graph:
    return Graph(im.ROOT)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_the_package_keeps_the_rule(package, rule):
    assert len(package.modules) > 50 and len(package.imports) > 300, "the walker found too little"
    problems = rule(package)
    assert not problems, f"{len(problems)} violation(s):\n" + "\n".join(problems)


def test_every_lazy_import_is_of_a_module_and_used():
    g = Graph(im.ROOT)
    used = {i.target for i in g.imports if i.in_function}
    assert set(LAZY_IMPORTS) <= g.modules and set(LAZY_IMPORTS) <= used, "LAZY_IMPORTS names a module no one imports lazily"


# -- each rule seen failing, on a small package written to tmp_path --------------------------------
def write_package(root: Path, files: dict[str, str]) -> Graph:
    """A package `mix_assets` under `root` from {relative path: source}; every folder gets an __init__.py."""
    for rel, src in {"__init__.py": "", **files}.items():
        path = root / "mix_assets" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for d in path.relative_to(root).parents:
            if d != Path(".") and not (root / d / "__init__.py").exists():
                (root / d / "__init__.py").write_text("")
        path.write_text(textwrap.dedent(src))
    return Graph(root)


def test_a_cycle_is_reported_with_its_chain(tmp_path):
    g = write_package(tmp_path, {
        "stages/dedup/minhash.py": "from mix_assets.stages.dedup import signatures\n",
        "stages/dedup/signatures.py": "import json\nfrom mix_assets.stages.dedup.minhash import sign\n",
        "stages/dedup/lsh.py": "from mix_assets.stages.dedup import minhash\n",  # reaches the cycle, not in it
        "stages/split/split.py": "def f():\n    from mix_assets.stages.split import tail\n",  # in a function: no cycle
        "stages/split/tail.py": "from mix_assets.stages.split import split\n",
    })
    assert cycles(g) == ["import cycle among mix_assets.stages.dedup.minhash, mix_assets.stages.dedup.signatures: "
                         "mix_assets.stages.dedup.minhash -(1)-> mix_assets.stages.dedup.signatures "
                         "-(2)-> mix_assets.stages.dedup.minhash"]
    assert imports_in_functions(g) == [
        "mix_assets.stages.split.split imports mix_assets.stages.split.tail inside a function at line 2: import it at "
        f"module level (a cycle it dodges must be cut instead); only {', '.join(sorted(LAZY_IMPORTS))} "
        "may be imported lazily"]


def test_a_longer_cycle_and_a_relative_import(tmp_path):
    g = write_package(tmp_path, {
        "a.py": "from mix_assets import b\n",
        "b.py": "from . import c\n",
        "c.py": "import mix_assets.a\n",
    })
    assert cycles(g) == ["import cycle among mix_assets.a, mix_assets.b, mix_assets.c: "
                         "mix_assets.a -(1)-> mix_assets.b -(1)-> mix_assets.c -(1)-> mix_assets.a"]


def test_the_core_reaching_a_stage_config_or_console_is_reported(tmp_path):
    g = write_package(tmp_path, {
        "core/tables.py": "from mix_assets.core import helper\n",
        "core/helper.py": "def f():\n    from mix_assets.resources import R\n",  # through a non-core module
        "resources.py": "from mix_assets.config import MixSpec\nfrom mix_assets.stages.common import gate\n",
        "config.py": "",
        "stages/common.py": "",
        "core/ui.py": "from mix_assets.console import metadata as md\n",
        "console/metadata.py": "",
        "format/manifest.py": "from mix_assets.console.metadata import table\n",  # the format may use the console
    })
    got = core_reaches_the_spec(g)
    assert ("mix_assets.core.tables reaches mix_assets.config (the core must not import mix_assets.stages, "
            "mix_assets.config, mix_assets.console): mix_assets.core.tables -(1)-> mix_assets.core.helper "
            "-(2, in a function)-> mix_assets.resources -(1)-> mix_assets.config") in got
    assert any(p.startswith("mix_assets.core.tables reaches mix_assets.stages.common") for p in got)
    assert any(p.startswith("mix_assets.core.ui reaches mix_assets.console.metadata") for p in got)
    assert not any("format" in p.split(" ")[0] for p in got)


def test_the_core_format_or_reader_reaching_a_stage_or_dagster_is_reported(tmp_path):
    g = write_package(tmp_path, {
        "format/manifest.py": "def card():\n    from mix_assets.stages.publish.publish import dataset_card\n",
        "stages/publish/publish.py": "import dagster as dg\n",
        "reader/__init__.py": "from mix_assets.format import manifest\n",
        "reader/torch_data.py": "from dagster_k8s import k8s_job_executor\n",
        "core/engine.py": "def go():\n    import dagster\n",
        "stages/tokens/shards.py": "import dagster\nfrom mix_assets.core import engine\n",  # a stage may
    })
    stages = core_format_reader_reach_a_stage(g)
    assert ("mix_assets.reader reaches mix_assets.stages.publish.publish (the core, format and reader must not "
            "import mix_assets.stages): mix_assets.reader -(1)-> mix_assets.format.manifest "
            "-(2, in a function)-> mix_assets.stages.publish.publish") in stages
    assert any(p.startswith("mix_assets.format.manifest reaches mix_assets.stages.publish.publish") for p in stages)
    assert len(stages) == 2, stages
    dagster = core_format_reader_import_dagster(g)
    assert ("mix_assets.core.engine imports dagster (dagster; the core, format and reader must not): "
            "mix_assets.core.engine -(2, in a function)-> dagster") in dagster
    assert any(p.startswith("mix_assets.reader.torch_data imports dagster (dagster_k8s") for p in dagster)
    assert any(p.startswith("mix_assets.reader imports dagster (dagster;") and "publish.publish -(1)-> dagster" in p
               for p in dagster)
    assert not any(p.startswith("mix_assets.stages") for p in dagster)


def test_a_stage_logic_module_importing_config_is_reported(tmp_path):
    g = write_package(tmp_path, {
        "config.py": "",
        "stages/audit/evals.py": "import json\nfrom mix_assets.config import MixSpec\n",
        "stages/audit/assets.py": "from mix_assets.config import MixSpec\n",
        "stages/audit/config.py": "from mix_assets import config\n",
        "stages/audit/metadata.py": "import mix_assets.config\n",
        "stages/common.py": "from mix_assets.config import MixSpec\n",  # the kit is not a stage's logic
        "stages/filters/rules/toy.py": "from mix_assets.config import MixSpec\n",  # a sub-package is logic too
    })
    why = (": a stage's logic takes its config section as an argument (only its assets, config, metadata modules "
           "import config)")
    assert stage_logic_imports_config(g) == [
        "mix_assets.stages.audit.evals imports mix_assets.config at line 2" + why,
        "mix_assets.stages.filters.rules.toy imports mix_assets.config at line 1" + why]


def test_lazy_imports_of_the_allowed_modules_pass(tmp_path):
    g = write_package(tmp_path, {
        "core/kernels_jit.py": "import numba\n",
        "core/textkeys.py": "def f():\n    from mix_assets.core import kernels_jit\n",
        "ray_engine.py": "import ray\n",
        "resources.py": "def g():\n    from mix_assets import ray_engine\n    import torch\n",
    })
    assert imports_in_functions(g) == []
    assert [r(g) for r in RULES] == [[]] * len(RULES)


def test_a_re_export_is_reported(tmp_path):
    g = write_package(tmp_path, {
        "core/paths.py": "def safe_path(p):\n    return p\n",
        "format/manifest.py": "from mix_assets.core.paths import safe_path  # kept for old callers\n",
        "format/checker.py": "from mix_assets.core.paths import safe_path\n\ndef check(p):\n    return safe_path(p)\n",
        "reader/__init__.py": "from mix_assets.core.paths import safe_path\n",  # the reader's public face
    })
    assert re_exports(g) == ["mix_assets.format.manifest imports safe_path from mix_assets.core.paths at line 1 and "
                             "never uses it (a re-export: import it from its own module)"]
