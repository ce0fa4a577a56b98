"""Small PNG charts and tables as markdown, for asset metadata in the Dagster UI.

Pure (no Dagster import). Charts are drawn with matplotlib's Agg canvas on a private `Figure` (no
pyplot global state, safe in multiprocess steps), kept under `MAX_PNG_BYTES` because metadata lives in
the event-log database, and embedded as a base64 data URI in markdown: the UI renders
`MetadataValue.md(chart_md)` as an image. PNG bytes carry no timestamp or version text, so the same
numbers give the same bytes.

Wrap the strings with `MetadataValue.md(...)`; for `MetadataValue.table` see `mix_assets/metadata.py`.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence

MAX_PNG_BYTES = 100_000
_SIZE = (5.0, 2.8)  # inches; at 80 dpi a 400x224 image, ~15-30 KB
_DPI = 80


class ChartError(ValueError):
    """Input a chart cannot be drawn from (the message names the chart and the field)."""


def _figure(size=_SIZE):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    """Render; shrink the resolution until the PNG fits MAX_PNG_BYTES."""
    dpi = _DPI
    while True:
        buf = io.BytesIO()
        # metadata=None entries drop matplotlib's "Software" text chunk: bytes depend on data only
        fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
        data = buf.getvalue()
        if len(data) <= MAX_PNG_BYTES or dpi <= 30:
            break
        dpi = int(dpi * 0.75)
    if len(data) > MAX_PNG_BYTES:
        raise ChartError(f"chart is {len(data)} bytes even at {dpi} dpi (limit {MAX_PNG_BYTES})")
    return data


def png_markdown(png: bytes, alt: str) -> str:
    """Markdown image with the PNG inline as a data URI."""
    alt = alt.replace("[", "(").replace("]", ")")
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


# -- charts ---------------------------------------------------------------------------------


def histogram_png(values: Sequence[float], title: str, xlabel: str, bins: int = 40,
                  log_x: bool = False, markers: Mapping[str, float] | None = None) -> bytes:
    """Histogram of `values` (e.g. document lengths); `markers` draw labelled vertical lines (p50, p99)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        raise ChartError(f"{title}: no finite values to plot")
    fig = _figure()
    ax = fig.add_subplot()
    if log_x:
        lo = max(arr[arr > 0].min(), 1e-9) if (arr > 0).any() else 1.0
        edges = np.geomspace(lo, max(arr.max(), lo * 10), bins + 1)
        ax.set_xscale("log")
    else:
        edges = bins
    ax.hist(arr if not log_x else np.clip(arr, edges[0], None), bins=edges, color="#4f6fad")
    for i, (name, x) in enumerate((markers or {}).items()):
        ax.axvline(x, color=f"C{i + 1}", linestyle="--", linewidth=1, label=f"{name} = {x:,.0f}")
    if markers:
        ax.legend(fontsize=7, frameon=False)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("count", fontsize=8)
    ax.tick_params(labelsize=7)
    return _png(fig)


def histogram_md(values: Sequence[float], title: str, xlabel: str, bins: int = 40, log_x: bool = False,
                 markers: Mapping[str, float] | None = None, caption: str | None = None) -> str:
    return _finish_png(histogram_png(values, title, xlabel, bins, log_x, markers), title, caption)


def lsh_candidate_probability(s: float, bands: int, rows: int) -> float:
    """P(two documents with Jaccard `s` share at least one LSH band) = 1 - (1 - s^r)^b."""
    return 1.0 - (1.0 - s**rows) ** bands


def s_curve_png(bands: int, rows: int, threshold: float | None = None,
                observed: Sequence[float] | None = None, title: str | None = None) -> bytes:
    """The MinHash-LSH S-curve for `bands` x `rows`; `observed` Jaccards of candidate pairs as a histogram."""
    import numpy as np

    if bands < 1 or rows < 1:
        raise ChartError(f"s_curve: bands and rows must be >= 1, got bands={bands}, rows={rows}")
    title = title or f"LSH S-curve: {bands} bands x {rows} rows"
    xs = np.linspace(0, 1, 201)
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(xs, 1 - (1 - xs**rows) ** bands, color="#4f6fad", label="P(candidate)")
    if threshold is not None:
        ax.axvline(threshold, color="C3", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
    knee = (1 / bands) ** (1 / rows)
    ax.axvline(knee, color="0.6", linestyle=":", linewidth=1, label=f"(1/b)^(1/r) = {knee:.2f}")
    if observed is not None and len(observed):
        ax2 = ax.twinx()
        ax2.hist(np.clip(np.asarray(observed, dtype=float), 0, 1), bins=40, range=(0, 1),
                 color="C1", alpha=0.35)
        ax2.set_ylabel("pairs", fontsize=8)
        ax2.tick_params(labelsize=7)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("Jaccard similarity", fontsize=8)
    ax.set_ylabel("P(candidate pair)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    return _png(fig)


def s_curve_md(bands: int, rows: int, threshold: float | None = None,
               observed: Sequence[float] | None = None, caption: str | None = None) -> str:
    title = f"LSH S-curve: {bands} bands x {rows} rows"
    return _finish_png(s_curve_png(bands, rows, threshold, observed, title), title, caption)


def bars_png(series: Mapping[str, Mapping[str, float]], title: str, ylabel: str,
             log_y: bool = False) -> bytes:
    """Grouped bars: `series` maps a series name ("before", "after") to {category: value}.

    Categories are the union over series, in first-seen order; a category missing from a series
    is drawn as 0 (a source that vanished shows as a missing bar, not a missing label).
    """
    import numpy as np

    if not series:
        raise ChartError(f"{title}: no series to plot")
    cats: list[str] = []
    for values in series.values():
        cats.extend(c for c in values if c not in cats)
    if not cats:
        raise ChartError(f"{title}: the series have no categories")
    fig = _figure((max(5.0, min(9.0, 1.0 + 0.6 * len(cats) * len(series))), 2.8))
    ax = fig.add_subplot()
    x = np.arange(len(cats))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [float(values.get(c, 0)) for c in cats],
               width, label=name, color=f"C{i}")
    ax.set_xticks(x, cats, rotation=30 if len(cats) > 4 else 0, ha="right" if len(cats) > 4 else "center")
    if log_y:
        ax.set_yscale("log")
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    if len(series) > 1:
        ax.legend(fontsize=7, frameon=False)
    return _png(fig)


def composition_md(before: Mapping[str, float], after: Mapping[str, float], title: str = "composition",
                   ylabel: str = "tokens", caption: str | None = None) -> str:
    """Before/after bars per source (the composition gate's picture)."""
    png = bars_png({"before": before, "after": after}, title, ylabel)
    return _finish_png(png, title, caption)


def bars_md(values: Mapping[str, float], title: str, ylabel: str, caption: str | None = None) -> str:
    return _finish_png(bars_png({ylabel: values}, title, ylabel), title, caption)


def _finish_png(png: bytes, title: str, caption: str | None) -> str:
    md = png_markdown(png, title)
    return f"{md}\n\n{caption}" if caption else md


# -- tables ---------------------------------------------------------------------------------


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
                   max_rows: int = 50) -> str:
    """Rows of dicts as a GitHub-style markdown table; numbers right-aligned, thousands separated.

    More than `max_rows` rows are cut with a final line saying how many were left out.
    """
    if columns is None:
        columns = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
    if not columns:
        raise ChartError("markdown_table: no columns (empty rows and no column list)")
    numeric = [all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
                   for r in rows if r.get(c) is not None) and any(r.get(c) is not None for r in rows)
               for c in columns]
    head = "| " + " | ".join(str(c) for c in columns) + " |"
    sep = "|" + "|".join("---:" if n else "---" for n in numeric) + "|"
    body = ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows[:max_rows]]
    out = "\n".join([head, sep, *body])
    if len(rows) > max_rows:
        out += f"\n\n{len(rows) - max_rows:,} more rows not shown"
    return out
