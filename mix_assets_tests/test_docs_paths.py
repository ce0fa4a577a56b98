"""Every code, test and bench path the user docs name exists.

README.md, bench/README.md and docs/*.md name files of this repository: `mix_assets/...py`,
`mix_assets_tests/...py`, `bench/...`, short paths inside the package or the tests (`core/transport.py`,
`stages/dedup/lsh.py`, `stages/dedup/test_lsh.py`, `format/paths.safe_path`), test ids
(`path.py::test_name`) and relative Markdown links. A module moves or a test is renamed and the page
still points at the old place: this test names the page, the line and the reference. A dotted tail must be
a name that module defines itself (not one it imports), so a function that moved is not found at its old home.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])

# Folders a short path may start with (resolved under mix_assets/, then mix_assets_tests/). lib/ and
# assets/ are the tree before issue 26: named in a page, they can only be stale.
SHORT_ROOTS = ("core", "format", "console", "stages", "reader", "support", "oracles", "lib", "assets")
PATH = re.compile(
    r"(?<![\w/.-])"                                   # not inside a longer path or a URL
    r"((?:mix_assets_tests|mix_assets|bench|" + "|".join(SHORT_ROOTS) + r")/[\w./*-]*[\w*])"
    r"(?:::([\w\[\]-]+(?:::[\w\[\]-]+)?))?"
)
BARE_TEST = re.compile(r"(?<![\w/.-])(test_\w+\.py)(?:::(\w+))?")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _candidates(ref: str) -> list[Path]:
    """Where `ref` may live: as written from the repository root, or a short path under the package
    or the tests. A dotted tail (`stages/dedup/dedup.sign_chunk`) names a module's attribute."""
    head = ref
    if not ref.endswith((".py", ".md", ".txt", ".yaml", ".json")) and "." in ref.rsplit("/", 1)[-1]:
        head = ref.rsplit("/", 1)[0] + "/" + ref.rsplit("/", 1)[-1].split(".", 1)[0]
    bases = [ROOT] if head.startswith(("mix_assets/", "mix_assets_tests/", "bench/")) else \
        [ROOT / "mix_assets", ROOT / "mix_assets_tests"]
    out = []
    for base in bases:
        out.append(base / head)
        if not head.endswith(".py") and "*" not in head:
            out.append(base / (head + ".py"))
    return out


def _exists(p: Path) -> bool:
    if "*" in str(p):
        return any(ROOT.glob(str(p.relative_to(ROOT))))
    return p.exists()


@functools.lru_cache(maxsize=None)
def _defined(path: Path) -> frozenset[str]:
    """The names a module defines at its top level (functions, classes, assignments), not those it imports:
    `format/manifest.safe_path` must name safe_path's own module."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return frozenset(out)


def _attribute(ref: str) -> str | None:
    """The module attribute a dotted tail names (`stages/dedup/dedup.sign_chunk` -> sign_chunk), else None."""
    last = ref.rsplit("/", 1)[-1]
    if ref.endswith((".py", ".md", ".txt", ".yaml", ".json")) or "." not in last:
        return None
    return last.split(".")[1]


def _has_test(path: Path, names: str) -> bool:
    src = path.read_text()
    return all(re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(n.split('[')[0])}\b", src, re.M)
               for n in names.split("::"))


def problems(page: Path, text: str) -> list[str]:
    found = []
    where = page.relative_to(ROOT)
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in PATH.finditer(line):
            ref, test = m.group(1).rstrip("."), m.group(2)
            hits = [p for p in _candidates(ref) if _exists(p)]
            if not hits:
                found.append(f"{where}:{lineno}: {ref} does not exist")
            elif test and hits[0].is_file() and not _has_test(hits[0], test):
                found.append(f"{where}:{lineno}: {ref} has no {test}")
            elif (attr := _attribute(ref)) and hits[0].suffix == ".py" and attr not in _defined(hits[0]):
                found.append(f"{where}:{lineno}: {ref}: {hits[0].relative_to(ROOT)} defines no {attr}")
        for m in BARE_TEST.finditer(line):
            if line[max(0, m.start() - 1):m.start()] == "/":
                continue
            path = ROOT / "mix_assets_tests" / m.group(1)
            if not path.exists():
                found.append(f"{where}:{lineno}: {m.group(1)} is not mix_assets_tests/{m.group(1)} "
                             "(name a test by its path under mix_assets_tests/)")
            elif m.group(2) and not _has_test(path, m.group(2)):
                found.append(f"{where}:{lineno}: {m.group(1)} has no {m.group(2)}")
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target) or target.startswith("<"):
                continue
            if not (page.parent / target).exists():
                found.append(f"{where}:{lineno}: link {target} does not exist")
    return found


def test_there_are_pages():
    assert ROOT / "README.md" in PAGES and len(PAGES) >= 10


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_path_a_page_names_exists(page):
    assert page.exists(), f"{page.relative_to(ROOT)} is missing"
    bad = problems(page, page.read_text())
    assert not bad, "paths named in the docs that do not exist:\n" + "\n".join(bad)


def test_a_bad_path_is_caught():
    page = ROOT / "docs" / "scale.md"
    text = "\n".join([
        "`mix_assets/core/engine.py` and `stages/dedup/lsh.py` and `core/transport.open_url` exist,",
        "`stages/dedup/test_lsh.py` too; `mix_assets/lib/engine.py` does not,",
        "nor `stages/dedup/test_lsh.py::test_no_such_test`, `lib/filters.py`, `bench/results/nope.md`,",
        "`test_reader.py` (it is reader/test_reader.py) or [a link](nope.md),",
        "nor `format/manifest.safe_path` (format/paths.py defines it; format/manifest.py does not).",
    ])
    bad = problems(page, text)
    assert [b.split(": ", 1)[1] for b in bad] == [
        "mix_assets/lib/engine.py does not exist",
        "stages/dedup/test_lsh.py has no test_no_such_test",
        "lib/filters.py does not exist",
        "bench/results/nope.md does not exist",
        "test_reader.py is not mix_assets_tests/test_reader.py (name a test by its path under mix_assets_tests/)",
        "link nope.md does not exist",
        "format/manifest.safe_path: mix_assets/format/manifest.py defines no safe_path",
    ], bad
