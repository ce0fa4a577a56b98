import base64
import random
import re

import pytest

from mix_assets.console import charts


def _png(md: str) -> bytes:
    m = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)\)", md)
    assert m, md[:80]
    return base64.b64decode(m.group(1))


def test_charts_are_small_deterministic_pngs():
    rng = random.Random(0)
    lengths = [rng.lognormvariate(7, 1.2) for _ in range(20_000)]
    mds = [
        charts.histogram_md(lengths, "document length", "chars", log_x=True, markers={"p50": 1100, "p99": 2e4}),
        charts.s_curve_md(16, 8, threshold=0.8, observed=[rng.random() for _ in range(500)], caption="b=16 r=8"),
        charts.composition_md({"web": 9e6, "code": 2e6, "math": 1e6}, {"web": 7e6, "code": 1.9e6}),
        charts.bars_md({"web": 0.12, "code": 0.03}, "kill rate", "share removed"),
    ]
    for md in mds:
        png = _png(md)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and 1000 < len(png) <= charts.MAX_PNG_BYTES
        assert b"matplotlib" not in png  # no version text: same data, same bytes
    assert mds[1].endswith("\n\nb=16 r=8")
    again = charts.histogram_md(lengths, "document length", "chars", log_x=True, markers={"p50": 1100, "p99": 2e4})
    assert _png(again) == _png(mds[0])


def _size(png: bytes) -> tuple[int, int]:
    import struct

    return struct.unpack(">II", png[16:24])  # IHDR width, height


def test_charts_are_drawn_at_the_size_the_ui_shows_them():
    """The UI shows a chart at its pixel size: wide enough to read, text no smaller than the UI's."""
    md = charts.histogram_md([1, 10, 100, 1000], "document length", "chars", log_x=True)
    w, h = _size(_png(md))
    assert 700 <= w <= 1000 and 300 <= h <= 500, (w, h)
    assert min(charts._FONT.values()) * charts._DPI / 72 >= 12  # px: the UI's body text is 12-14 px
    many = charts.bars_md({f"source_{i}": i for i in range(12)}, "many", "docs")
    assert _size(_png(many))[0] <= 1200


def test_contamination_chart_has_counts_per_source_and_task():
    rows = [{"source": s, "task": t, "docs_scanned": 100, "docs_with_overlap": n, "overlap_ngrams": 9 * n}
            for s, t, n in [("web", "gsm8k", 4), ("web", "mmlu", 0), ("code", "gsm8k", 0), ("code", "mmlu", 2)]]
    md = charts.contamination_md(rows)
    assert md.startswith("![docs with overlap per source, by eval task](data:image/png;base64,")
    assert _png(md).startswith(b"\x89PNG") and _png(md) == _png(charts.contamination_md(rows))
    assert _png(md) != _png(charts.contamination_md(rows, count="overlap_ngrams"))
    with pytest.raises(charts.ChartError, match="has no 'overlap_ngrams'"):
        charts.contamination_md([{"source": "web", "task": "t", "docs_with_overlap": 1}], count="overlap_ngrams")


def test_lsh_probability_and_bad_input():
    assert charts.lsh_candidate_probability(0.8, 14, 8) == pytest.approx(0.924, abs=1e-3)
    assert charts.lsh_candidate_probability(0.0, 14, 8) == 0.0
    with pytest.raises(charts.ChartError, match="no finite values"):
        charts.histogram_md([float("nan")], "empty", "x")
    with pytest.raises(charts.ChartError, match="bands and rows must be >= 1"):
        charts.s_curve_md(0, 8)


def test_markdown_table():
    md = charts.markdown_table([{"source": "web|x", "tokens": 1234567, "share": 0.5, "kept": True},
                                {"source": "code", "tokens": 10, "share": None}], max_rows=1)
    lines = md.splitlines()
    assert lines[0] == "| source | tokens | share | kept |"
    assert lines[1] == "|---|---:|---:|---|"
    assert lines[2] == "| web\\|x | 1,234,567 | 0.5 | yes |"
    assert lines[-1] == "1 more rows not shown"


def test_charts_are_the_bytes_the_first_rendering_drew():
    import numpy as np

    from mix_assets_tests.oracles import charts_reference as ref

    lengths = np.random.default_rng(0).lognormal(7, 1, 20_000).astype(int)
    for kw in ({"log_x": True}, {"markers": {"p50": 900.0, "p99": 4000.0}}, {"bins": 7}):
        assert charts.histogram_png(lengths, "length", "characters", **kw) == \
            ref.histogram_png(lengths, "length", "characters", **kw), kw
    draws = [lambda: charts.s_curve_png(27, 4, 0.8, observed=[0.5, 0.82, 0.9]),
             lambda: charts.bars_png({"before": {"a": 1, "b": 20}, "after": {"a": 1, "c": 3}}, "bars", "tokens",
                                     labels=True, log_y=True)]
    new = [d() for d in draws]
    with ref.old_png():
        assert [d() for d in draws] == new


def test_preload_imports_matplotlib_on_a_thread_and_charts_keep_their_bytes():
    """charts.preload (raw/<source> starts it before reading): matplotlib is imported on a daemon thread; a
    chart drawn after it is the same PNG as in a process that did not preload."""
    import subprocess
    import sys

    code = ("import sys, hashlib; from mix_assets.console import charts; "
            "assert 'matplotlib.figure' not in sys.modules; "
            "{pre}"
            "print(hashlib.sha256(charts.histogram_png([1, 2, 2, 3, 50], 't', 'x', log_x=True)).hexdigest())")
    pre = "t = charts.preload(); t.join(60); assert t.daemon and 'matplotlib.figure' in sys.modules; "
    # a chart drawn while the thread still imports: it waits for it (two threads importing matplotlib at once
    # see its modules half initialised; raw/<source>'s histogram failed so before the wait)
    race = "assert charts.preload() is not None; "
    out = [subprocess.run([sys.executable, "-c", code.format(pre=p)], capture_output=True, text=True, timeout=120)
           for p in (pre, race, "")]
    for r in out:
        assert r.returncode == 0, r.stderr[-2000:]
    assert out[0].stdout == out[1].stdout == out[2].stdout
