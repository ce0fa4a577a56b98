"""console/charts.py's rendering as first written, kept where a cheaper one replaced it: savefig running the
constrained layout itself (a dry-run draw, then the real one) and `ax.hist`'s patch per bin. The oracle
the current charts must match byte for byte (mix_assets_tests/console/test_charts.py)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
from matplotlib.ticker import MaxNLocator

from mix_assets.console import charts
from mix_assets.console.charts import _DPI, _TICKS, ChartError, _figure, _legend, _log_ticks, _style


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue()


@contextlib.contextmanager
def old_png():
    """charts.* rendered by savefig's own layout while the block runs."""
    saved, charts._png = charts._png, _png
    try:
        yield
    finally:
        charts._png = saved


def histogram_png(values, title: str, xlabel: str, bins: int = 40, log_x: bool = False, markers=None) -> bytes:
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
    ax.hist(arr if not log_x else np.clip(arr, edges[0], None), bins=edges, color="#4f6fad")
    for i, (name, x) in enumerate((markers or {}).items()):
        ax.axvline(x, color=f"C{i + 1}", linestyle="--", linewidth=1.5, label=f"{name} = {x:,.0f}")
    _style(ax, title, xlabel, "count", integer_y=True)
    if markers:
        _legend(ax)
    return _png(fig)
