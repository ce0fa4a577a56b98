"""The format package sits below the stages: it imports the core and itself, never a stage, the reader or
Dagster, at module level or inside a function (the card and the split rule it checks live below it)."""

from mix_assets.core import imports as im

ALLOWED = ("mix_assets.core.", "mix_assets.format.")


def test_format_imports_no_stage_reader_or_dagster():
    found = [f"{i.importer}:{i.line}: {i.target}" for i in im.imports()
             if i.importer.startswith("mix_assets.format")
             and ((i.target.startswith("mix_assets") and not (i.target + ".").startswith(ALLOWED))
                  or i.target.split(".")[0] == "dagster")]
    assert found == []
