"""The one vocabulary of the metadata the UI shows, and the builders every stage uses: tables, Markdown, charts,
Parquet outputs, problem lists, peak memory. Each stage builds its own values from these in
`stages/<stage>/metadata.py`, so asset modules stay thin; this module imports no stage.

Key convention (`<noun>_<unit>`, snake_case, the unit last):
  * counts end in the thing counted: `docs`, `kept_docs`, `train_tokens`, `overlap_ngrams`, `shards`,
    `files`, `problems`; sizes in `_bytes` / `_mb`; durations in `_seconds`; rates in `_per_second`;
  * fractions in [0, 1] end in `_share` (`val_share`, `excluded_share`, `train_seam_share`), rounded to
    4 places (`share`); seconds to 2 (`seconds`);
  * a breakdown by a configured name (source, task) or a reason is `<key>/<name>`:
    `kept_tokens/web`, `rows/demo_qa`, `excluded_docs/near_dup`;
  * identifiers and text are bare nouns (`path`, `fingerprint`, `revision`); a list of problems is
    `problem_list` beside its count `problems`;
  * each table appears once, as a `MetadataValue.table` named after its rows, holding only the columns
    that decide (the row's name, then the deciding figure: at 1,600 px the asset page gives a table
    ~450 px, three columns of names like `python_reference` / `gopher_repetition`, and cuts the rest);
    a wider table's every column is beside it as Markdown, `<table>_md` (a list of rows when short
    enough for the UI to show inline; a table no gate reads, whose name alone takes three columns, is
    Markdown only), and a chart beside it is `<table>_chart`. Table cells are display text: counts with thousands separators,
    `_share` columns as percentages. Parquet-backed assets carry `dagster/row_count` and
    `dagster/column_schema`.
Numeric keys are the same on every run, so the Plots view draws continuous lines. Every
materialisation also carries `peak_rss_mb` (`peak_rss`; per step only under a per-step-process executor).
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata as importlib_metadata

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mix_assets.console import charts
from mix_assets.core import imports, layout

SHARE_PLACES = 4
SECONDS_PLACES = 2


# -- generic values -------------------------------------------------------------------------------


def share(x: float) -> float:
    return round(float(x), SHARE_PLACES)


def seconds(x: float) -> float:
    return round(float(x), SECONDS_PLACES)


def _column_type(values: list[object]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "bool"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "int"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "float"
    return "string"


percent = charts.percent  # a share as the UI shows it: 0.1234 -> "12.3%"


def number(v: object, column: str = "") -> object:
    """A table cell as display text: ints with thousands separators, a `_share` column's floats as
    percentages, other floats to 4 significant digits; strings and None as they are."""
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        if column.endswith("_share"):
            return percent(v)
        return f"{float(v):,.4g}" if abs(v) < 1e6 else f"{float(v):,.0f}"
    return str(v)


def _columns(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None, what: str) -> list[str]:
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    if not columns:
        raise ValueError(f"{what}: no columns (empty rows and no column list)")
    return list(columns)


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
          descriptions: Mapping[str, str] | None = None) -> dg.TableMetadataValue:
    """Rows of dicts as `MetadataValue.table`: the schema's types inferred from the values, the cells as
    display text (`number`: the UI prints a cell as it is, 1234567 without separators)."""
    columns = _columns(rows, columns, "table")
    types = {c: _column_type([r.get(c) for r in rows]) for c in columns}
    schema = dg.TableSchema(columns=[
        dg.TableColumn(c, types[c], description=(descriptions or {}).get(c)
                       or ("a percentage" if c.endswith("_share") and types[c] == "float" else None))
        for c in columns
    ])
    records = [dg.TableRecord({c: number(r.get(c), c) for c in columns}) for r in rows]
    return dg.MetadataValue.table(records=records, schema=schema)


MD_INLINE_CHARS = 1000  # the UI shows Markdown shorter than this inline (a table cut like any), longer in a dialog


def markdown_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
                   max_rows: int = 50) -> dg.MarkdownMetadataValue:
    """Rows as a markdown table, `_share` columns as percentages. A table short enough for the UI to show
    inline, in the ~450 px it gives a metadata value, is given as a list of rows instead (one line of
    `column value` pairs per row, which wraps): inline, a wide table is cut like a table entry."""
    columns = _columns(rows, columns, "markdown_table")
    pct = [c for c in columns if c.endswith("_share")]
    out = charts.markdown_table(rows, columns, max_rows, percent=pct)
    if len(out) < MD_INLINE_CHARS and len(columns) > 3:
        out = charts.markdown_records(rows, columns, max_rows, percent=pct)
    return dg.MetadataValue.md(out)


FULL_ROWS = 200  # rows of a `<table>_md` (the table itself holds every row)


def wide_table(key: str, rows: Sequence[Mapping[str, object]], columns: Sequence[str],
               deciding: Sequence[str]) -> dict:
    """`key`: the table cut to the columns that decide (`deciding`: the row's name first); `key_md`: every
    column as Markdown (the UI shows a wider table cut at 1,600 px)."""
    missing = [c for c in deciding if c not in columns]
    if missing:
        raise ValueError(f"wide_table {key}: deciding column(s) {missing} not among {list(columns)}")
    return {key: table(rows, columns=deciding), f"{key}_md": markdown_table(rows, columns, FULL_ROWS)}


def chart(markdown: str) -> dg.MarkdownMetadataValue:
    """A chart from `console/charts.py` (`*_md` functions) as markdown metadata."""
    return dg.MetadataValue.md(markdown)


def stored_chart(storage, name: str, params: Mapping[str, object], draw) -> str:
    """`draw()` (a `charts.*_md` string) for a chart that is a function of `params` alone, read from the storage
    root when drawn before with the same parameters, charts code and matplotlib: a rebuild draws no chart whose
    numbers did not change (matplotlib's import and layout cost ~0.1-0.9 s a process). `storage` None: drawn."""
    if storage is None:
        return draw()
    key = layout.CHARTS.format(key=_chart_key(name, params))
    try:
        if storage.exists(key):
            return storage.read_text(key)
    except OSError:
        pass
    md = draw()
    try:
        storage.write_text(key, md)
    except OSError:  # a cache: the chart is drawn again next time
        pass
    return md


def chart_once(name: str, inputs: object, draw: Callable[[], str], previous: Mapping | None = None) -> dict:
    """{name: a chart, `<name>_key`: the key of what it is drawn from}: `draw()` (a `console/charts.py` `*_md`
    call), or the chart `previous` (the asset's last materialisation's metadata) holds under the same key.

    A chart's bytes are a function of its inputs, the chart code and matplotlib (charts.py: no timestamp), so
    the key (`inputs` as JSON, the chart modules' source, matplotlib's version) names them: a rebuild whose
    figures did not change shows the same picture without matplotlib's import and layout (~0.5 s in a fresh
    process)."""
    key = _chart_key(name, inputs)
    held = previous.get(name) if previous else None
    if held is not None and getattr(previous.get(f"{name}_key"), "value", None) == key:
        return {name: chart(getattr(held, "value", held)), f"{name}_key": dg.MetadataValue.text(key)}
    return {name: chart(draw()), f"{name}_key": dg.MetadataValue.text(key)}


def _chart_key(name: str, inputs: object) -> str:
    doc = json.dumps({"chart": name, "inputs": inputs, "code": imports.source_version(charts.__name__),
                      "matplotlib": importlib_metadata.version("matplotlib")}, sort_keys=True, default=str)
    return hashlib.sha256(doc.encode()).hexdigest()[:32]


_ARROW_TYPES = {"string": "string", "large_string": "string", "bool": "bool", "float": "float",
                "double": "float", "int64": "int", "int32": "int"}


def column_schema(schema: pa.Schema) -> dg.TableSchemaMetadataValue:
    """An Arrow schema as `dagster/column_schema` (the UI's column list of the asset)."""
    return dg.MetadataValue.table_schema(dg.TableSchema(columns=[
        dg.TableColumn(f.name, _ARROW_TYPES.get(str(f.type), str(f.type))) for f in schema]))


def parquet_output(storage, key: str, t: pa.Table) -> dict:
    """path, `dagster/row_count` and `dagster/column_schema` of a Parquet file an asset wrote."""
    return {"path": dg.MetadataValue.path(storage.uri(key)), "dagster/row_count": t.num_rows,
            "dagster/column_schema": column_schema(t.schema)}


def parquet_file_output(storage, key: str, schema: pa.Schema) -> dict:
    """`parquet_output` of a file written a row group at a time with `schema`: rows from its footer."""
    rows = pq.ParquetFile(storage.source(key)).metadata.num_rows
    return {"path": dg.MetadataValue.path(storage.uri(key)), "dagster/row_count": rows,
            "dagster/column_schema": column_schema(schema)}


def problems(found: Sequence[str], shown: int = 20) -> dict:
    """`problems` (count, plotted) and `problem_list` (the first `shown`, as a markdown list)."""
    lines = [f"- {p}" for p in found[:shown]]
    if len(found) > shown:
        lines.append(f"- ... and {len(found) - shown} more")
    return {"problems": len(found), "problem_list": dg.MetadataValue.md("\n".join(lines) or "none")}


def peak_rss() -> dict:
    """`peak_rss_mb`: the peak resident memory of the process that ran the step, so far (getrusage).

    It is the step's own peak only when the step has a process to itself (MIX_EXECUTOR=multiprocess
    or k8s); under the default in_process executor it is the run's peak up to this step, so it is
    the largest of every step run before it. Ray map tasks run in other processes and are not in it.
    """
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux, bytes on macOS
    return {"peak_rss_mb": round(kb / (1e6 if sys.platform == "darwin" else 1e3), 1)}


def by_name(key: str, values: Mapping[str, object]) -> dict:
    """`{key}/{name}` for every name (a source, a task, a reason)."""
    return {f"{key}/{name}": v for name, v in values.items()}
