"""Small PNG charts and tables as markdown, for asset metadata in the Dagster UI.

Pure (no Dagster import). Charts are drawn with matplotlib's Agg canvas on a private `Figure` (no
pyplot global state, safe in multiprocess steps), kept under `MAX_PNG_BYTES` because metadata lives in
the event-log database, and embedded as a base64 data URI in markdown: the UI renders
`MetadataValue.md(chart_md)` as an image. PNG bytes carry no timestamp or version text, so the same
numbers give the same bytes.

Wrap the strings with `MetadataValue.md(...)`; for `MetadataValue.table` see `mix_assets/console/metadata.py`.
"""

from __future__ import annotations

import base64
import io
import math
import re
import sys
import threading
from collections.abc import Mapping, Sequence

MAX_PNG_BYTES = 100_000
# The UI shows a chart at its pixel size inside the "Show Markdown" dialog (about 700-900 px wide),
# so the figure is drawn for that width with fonts the size of the UI's own text (12-14 px).
_SIZE = (7.2, 3.6)  # inches; at 100 dpi a 720x360 image, ~20-40 KB
_DPI = 100
_FONT = {"title": 13, "label": 11, "tick": 10, "legend": 10, "note": 9}  # points; 1 pt = 1.39 px here
_TICKS = 5  # at most this many major ticks per linear axis


class ChartError(ValueError):
    """Input a chart cannot be drawn from (the message names the chart and the field)."""


_PRELOADS: list[threading.Thread] = []  # preload threads started in this process
_PRELOAD_LOCK = threading.Lock()


def preload() -> threading.Thread | None:
    """Start importing matplotlib's figure, Agg canvas and ticker on a daemon thread, for a step that charts
    once its work is done: the import (~0.3 CPU s, the first chart's extra cost in a process) then overlaps that
    work instead of following it. None when matplotlib is imported already or an import is under way.

    Every chart function here waits for that thread before it imports matplotlib itself: two threads importing
    matplotlib at once can see its modules half initialised (they import each other) and fail. Nothing else in
    the step that preloads may import matplotlib."""
    def load() -> None:
        try:
            import matplotlib.backends.backend_agg  # noqa: F401
            import matplotlib.figure  # noqa: F401
            import matplotlib.ticker  # noqa: F401
        except Exception:  # noqa: BLE001 - the chart's own import reports it
            pass

    with _PRELOAD_LOCK:
        if "matplotlib.ticker" in sys.modules or any(t.is_alive() for t in _PRELOADS):
            return None
        t = threading.Thread(target=load, name="charts-preload", daemon=True)
        _PRELOADS[:] = [t]
        t.start()
    return t


def _preloaded() -> None:
    """Wait for a `preload` still importing matplotlib (see there why)."""
    for t in list(_PRELOADS):
        t.join()


def _figure(size=_SIZE):
    _preloaded()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(ax, title: str, xlabel: str | None, ylabel: str | None, integer_y: bool = False) -> None:
    """Legible fonts, few ticks, a light grid behind the data, no top/right frame."""
    _preloaded()
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title, fontsize=_FONT["title"], loc="left")
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=_FONT["label"])
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=_FONT["label"])
    ax.tick_params(labelsize=_FONT["tick"])
    if ax.get_yscale() == "linear":
        ax.yaxis.set_major_locator(MaxNLocator(_TICKS, integer=integer_y))
    ax.grid(axis="y", color="0.9", linewidth=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _log_ticks(axis, lo: float, hi: float) -> None:
    """A log axis with a few plain labels (200, 500, 1K, 2K): 1-2-5 steps over up to three decades,
    powers of ten beyond; no minor labels (matplotlib labels those on a short range: "6 x 10^2")."""
    _preloaded()
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    decades = math.log10(max(hi, lo * 1.0001) / lo)
    subs = (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: _compact(v)))


def _compact(v: float) -> str:
    """12000 -> '12K', 2500000 -> '2.5M', 0.5 -> '0.5'."""
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(v) >= div:
            return f"{v / div:g}{unit}"
    return f"{v:g}"


def _legend(ax, **kw) -> None:
    ax.legend(fontsize=_FONT["legend"], title_fontsize=_FONT["legend"], frameon=False, **kw)


def _png(fig) -> bytes:
    """Render; shrink the resolution until the PNG fits MAX_PNG_BYTES."""
    # Lay out once, then draw without the engine: savefig would lay out in a dry-run draw and again in
    # the real one (the same PNG bytes, one layout and one draw fewer).
    fig.get_layout_engine().execute(fig)
    fig.set_layout_engine("none")
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
    _preloaded()
    from matplotlib.ticker import MaxNLocator

    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        raise ChartError(f"{title}: no finite values to plot")
    fig = _figure()
    ax = fig.add_subplot()
    if log_x:
        lo = max(arr[arr > 0].min(), 1e-9) if (arr > 0).any() else 1.0
        edges = np.geomspace(lo, max(arr.max(), lo * 2), bins + 1)  # at least an octave wide
        ax.set_xscale("log")
        _log_ticks(ax.xaxis, edges[0], edges[-1])
    else:
        edges = bins
        ax.xaxis.set_major_locator(MaxNLocator(_TICKS))
    # one filled step outline, not a patch per bin (what ax.hist draws): the same picture, drawn faster
    counts, edges = np.histogram(arr if not log_x else np.clip(arr, edges[0], None), bins=edges)
    ax.stairs(counts, edges, fill=True, color="#4f6fad")
    for i, (name, x) in enumerate((markers or {}).items()):
        ax.axvline(x, color=f"C{i + 1}", linestyle="--", linewidth=1.5, label=f"{name} = {x:,.0f}")
    _style(ax, title, xlabel, "count", integer_y=True)
    if markers:
        _legend(ax)
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
    _preloaded()
    from matplotlib.ticker import MaxNLocator

    if bands < 1 or rows < 1:
        raise ChartError(f"s_curve: bands and rows must be >= 1, got bands={bands}, rows={rows}")
    title = title or f"LSH S-curve: {bands} bands x {rows} rows"
    xs = np.linspace(0, 1, 201)
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(xs, 1 - (1 - xs**rows) ** bands, color="#4f6fad", linewidth=2, label="P(candidate)")
    if threshold is not None:
        ax.axvline(threshold, color="C3", linestyle="--", linewidth=1.5, label=f"threshold {threshold:g}")
    knee = (1 / bands) ** (1 / rows)
    ax.axvline(knee, color="0.5", linestyle=":", linewidth=1.5, label=f"(1/b)^(1/r) = {knee:.2f}")
    if observed is not None and len(observed):
        ax2 = ax.twinx()
        ax2.hist(np.clip(np.asarray(observed, dtype=float), 0, 1), bins=40, range=(0, 1),
                 color="C1", alpha=0.35)
        ax2.set_ylabel("pairs", fontsize=_FONT["label"])
        ax2.tick_params(labelsize=_FONT["tick"])
        ax2.yaxis.set_major_locator(MaxNLocator(_TICKS, integer=True))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(_TICKS))
    _style(ax, title, "Jaccard similarity", "P(candidate pair)")
    _legend(ax, loc="upper left")
    return _png(fig)


def s_curve_md(bands: int, rows: int, threshold: float | None = None,
               observed: Sequence[float] | None = None, caption: str | None = None) -> str:
    title = f"LSH S-curve: {bands} bands x {rows} rows"
    return _finish_png(s_curve_png(bands, rows, threshold, observed, title), title, caption)


def bars_png(series: Mapping[str, Mapping[str, float]], title: str, ylabel: str,
             log_y: bool = False, labels: bool = False, legend: bool | None = None, legend_title: str | None = None) -> bytes:
    """Grouped bars: `series` maps a series name ("before", "after") to {category: value}.

    Categories are the union over series, in first-seen order; a category missing from a series
    is drawn as 0 (a source that vanished shows as a missing bar, not a missing label). `labels`
    writes each bar's value above it (counts read exactly, and a zero is visibly a zero); the
    legend names the series (default: when there is more than one).
    """
    import numpy as np

    if not series:
        raise ChartError(f"{title}: no series to plot")
    cats: list[str] = []
    for values in series.values():
        cats.extend(c for c in values if c not in cats)
    if not cats:
        raise ChartError(f"{title}: the series have no categories")
    fig = _figure((max(_SIZE[0], min(12.0, 1.5 + 0.45 * len(cats) * len(series))), _SIZE[1]))
    ax = fig.add_subplot()
    x = np.arange(len(cats))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, [float(values.get(c, 0)) for c in cats],
                      width, label=name, color=f"C{i}")
        if labels:
            ax.bar_label(bars, fmt="{:,.0f}", fontsize=_FONT["note"], padding=2)
    tilt = len(cats) > 4
    ax.set_xticks(x, cats, rotation=25 if tilt else 0, ha="right" if tilt else "center")
    if log_y:
        ax.set_yscale("log")
    if labels:
        ax.margins(y=0.15)  # room for the labels above the tallest bar
    _style(ax, title, None, ylabel, integer_y=True)
    if len(series) > 1 if legend is None else legend:
        _legend(ax, title=legend_title)
    return _png(fig)


def composition_md(before: Mapping[str, float], after: Mapping[str, float], title: str = "composition",
                   ylabel: str = "tokens", caption: str | None = None) -> str:
    """Before/after bars per source (the composition gate's picture)."""
    png = bars_png({"before": before, "after": after}, title, ylabel)
    return _finish_png(png, title, caption)


def bars_md(values: Mapping[str, float], title: str, ylabel: str, caption: str | None = None) -> str:
    return _finish_png(bars_png({ylabel: values}, title, ylabel), title, caption)


def contamination_md(rows: Sequence[Mapping[str, object]], count: str = "docs_with_overlap",
                     caption: str | None = None) -> str:
    """Bars of `count` per source, one bar per eval task, from the report's source x task rows.

    Counts only: the rows' `source`, `task` and `count` fields are read, never any item text.
    """
    series: dict[str, dict[str, float]] = {}
    for r in rows:
        if count not in r:
            raise ChartError(f"contamination chart: row {r.get('source')} x {r.get('task')} has no {count!r}")
        series.setdefault(str(r["task"]), {})[str(r["source"])] = float(r[count])  # type: ignore[arg-type]
    title = f"{count.replace('_', ' ')} per source, by eval task"
    png = bars_png(series, title, count.replace("_", " "), labels=True, legend=True, legend_title="eval task")
    return _finish_png(png, title, caption)


def _finish_png(png: bytes, title: str, caption: str | None) -> str:
    md = png_markdown(png, title)
    return f"{md}\n\n{caption}" if caption else md


# -- tables ---------------------------------------------------------------------------------


def percent(v: float) -> str:
    """0.1234 -> '12.3%', 0.00123 -> '0.12%', 0 -> '0%'."""
    p = 100 * float(v)
    if p == 0:
        return "0%"
    return f"{p:.1f}%" if abs(p) >= 1 else f"{p:.2g}%"


def code_span(text: object) -> str:
    """`text` as a Markdown code span, shown literally (no emphasis, link or HTML: `object.__add__(self, other)`
    stays that, not a bold "add"), on one line. Its delimiter is one backtick longer than the longest run
    inside, padded with a space where the text starts or ends with a backtick (CommonMark strips one space
    from each side). In a table put it through `markdown_table`, which escapes its `|` (GFM reads `\\|`
    inside a code span in a cell as `|`)."""
    t = " ".join(str(text).splitlines())
    if not t:
        return ""
    run = max((len(m) for m in re.findall(r"`+", t)), default=0)
    if t[0] == "`" or t[-1] == "`" or (t[0] == " " and t[-1] == " " and t.strip()):
        t = f" {t} "
    return f"{'`' * (run + 1)}{t}{'`' * (run + 1)}"


def _cell(v: object, pct: bool = False) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if pct:
            return percent(v)
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str] | None = None,
                   max_rows: int = 50, percent: Sequence[str] = ()) -> str:
    """Rows of dicts as a GitHub-style markdown table; numbers right-aligned, thousands separated, the
    `percent` columns' floats as percentages.

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
    pct = set(percent)
    body = ["| " + " | ".join(_cell(r.get(c), c in pct) for c in columns) + " |" for r in rows[:max_rows]]
    out = "\n".join([head, sep, *body])
    if len(rows) > max_rows:
        out += f"\n\n{len(rows) - max_rows:,} more rows not shown"
    return out


def markdown_records(rows: Sequence[Mapping[str, object]], columns: Sequence[str], max_rows: int = 50,
                     percent: Sequence[str] = ()) -> str:
    """Rows of dicts as a Markdown list, one item per row: `column value` pairs joined by " · ", numbers
    formatted as `markdown_table` formats them, text as code spans (shown as it is); a list wraps where
    a table would be cut."""
    pct = set(percent)

    def cell(v: object, c: str) -> str:
        return code_span(v) if isinstance(v, str) and v else _cell(v, c in pct)

    body = ["- " + " · ".join(f"{c} {cell(r.get(c), c)}" for c in columns) for r in rows[:max_rows]]
    out = "\n".join(body) or "no rows"
    if len(rows) > max_rows:
        out += f"\n\n{len(rows) - max_rows:,} more rows not shown"
    return out
