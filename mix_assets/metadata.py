"""Dagster-side wrappers for metadata a reviewer reads in the UI: tables, charts, markdown tables.

The drawing and formatting is pure code in `mix_assets/lib/charts.py`; this module only turns it into
`MetadataValue`s so asset modules stay thin:

    metadata = {
        "composition": table(rows),                              # sortable table in the UI
        "composition_chart": chart(charts.composition_md(before, after)),
        "n_tokens": n_tokens,                                    # plain numbers: plotted across runs
    }
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from mix_assets.lib import charts


def _column_type(values: list[object]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float"
    return "string"


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
          descriptions: Mapping[str, str] | None = None) -> dg.TableMetadataValue:
    """Rows of dicts as `MetadataValue.table` with a schema inferred from the values."""
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    if not columns:
        raise ValueError("table: no columns (empty rows and no column list)")
    types = {c: _column_type([r.get(c) for r in rows]) for c in columns}
    schema = dg.TableSchema(columns=[
        dg.TableColumn(c, types[c], description=(descriptions or {}).get(c)) for c in columns
    ])

    def value(v: object, t: str) -> object:
        if v is None or t != "string":
            return v
        return str(v)

    records = [dg.TableRecord({c: value(r.get(c), types[c]) for c in columns}) for r in rows]
    return dg.MetadataValue.table(records=records, schema=schema)


def markdown_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
                   max_rows: int = 50) -> dg.MarkdownMetadataValue:
    """Rows as a markdown table (renders inline in check results and the run log)."""
    return dg.MetadataValue.md(charts.markdown_table(rows, columns, max_rows))


def chart(markdown: str) -> dg.MarkdownMetadataValue:
    """A chart from `lib/charts.py` (`*_md` functions) as markdown metadata."""
    return dg.MetadataValue.md(markdown)
