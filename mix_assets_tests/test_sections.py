"""Where config sections and UI metadata live (issue 26): each stage defines its config section and builds its
metadata; `mix_assets/config.py` composes the sections and no logic module imports it; console/ imports no stage."""

from pathlib import Path

import mix_assets
from mix_assets import config
from mix_assets.core import imports as im
from mix_assets.core import spec

PACKAGE = Path(mix_assets.__file__).parent
STAGES = sorted(p.name for p in (PACKAGE / "stages").iterdir() if (p / "assets.py").exists())


def imported_modules(path: Path) -> set[str]:
    """Every module the module at `path` imports, at any depth (inside functions too), relative imports
    resolved: the package's import graph (core/imports.py, the one the layering test reads)."""
    name = _NAMES[path.resolve()]
    return {i.target for i in im.imports() if i.importer == name}


_NAMES = {path.resolve(): name for name, path in im.package_modules().items()}


def _rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def logic_modules() -> list[Path]:
    """The modules that do the work: core, format, console, reader and each stage but its assets (the wiring)."""
    return sorted(p for d in ("core", "format", "console", "reader", "stages") for p in (PACKAGE / d).rglob("*.py")
                  if p.name != "assets.py")


def test_no_logic_module_imports_the_mix_config():
    hits = [_rel(p) for p in logic_modules() if "mix_assets.config" in imported_modules(p)]
    assert not hits, f"import mix_assets.config (take the spec as a parameter, or your own section): {hits}"


def test_config_sections_import_neither_dagster_nor_the_composed_config():
    sections = sorted((PACKAGE / "stages").glob("*/config.py"))
    assert len(sections) >= 6, sections
    hits = [f"{_rel(p)}: {m}" for p in sections + [PACKAGE / "core" / "spec.py"] for m in imported_modules(p)
            if m.split(".")[0] == "dagster" or m == "mix_assets.config" or m.startswith("mix_assets.config.")]
    assert not hits, hits


def test_console_imports_no_stage():
    hits = [f"{_rel(p)}: {m}" for p in sorted((PACKAGE / "console").glob("*.py")) for m in imported_modules(p)
            if m.startswith("mix_assets.stages")]
    assert not hits, hits


def test_a_stage_builds_its_metadata_in_its_own_module():
    """Each stage's assets take their metadata from stages/<stage>/metadata.py, never another stage's."""
    wrong = []
    for stage in STAGES:
        mods = imported_modules(PACKAGE / "stages" / stage / "assets.py")
        own = f"mix_assets.stages.{stage}.metadata"
        wrong += [f"{stage}/assets.py: {m}" for m in mods
                  if m.endswith(".metadata") and m.startswith("mix_assets.stages.") and m != own]
        if (PACKAGE / "stages" / stage / "metadata.py").exists() and own not in mods:
            wrong.append(f"{stage}/assets.py does not use {own}")
    assert not wrong, wrong


def test_the_mix_spec_composes_the_stage_sections():
    """The sections are the stages' own classes, built on core/spec.Strict (unknown keys refused)."""
    fields = config.MixSpec.model_fields
    owners = {"sources": "sources", "tokenizer": "tokens", "packing": "tokens", "dedup": "dedup", "audit": "audit",
              "split": "split", "publish": "publish", "demo_corpus": "sources"}
    for field, stage in owners.items():
        ann = fields[field].annotation
        cls = next(a for a in (getattr(ann, "__args__", None) or (ann,)) if isinstance(a, type))
        assert cls.__module__ == f"mix_assets.stages.{stage}.config", (field, cls.__module__)
        assert issubclass(cls, spec.Strict), field
