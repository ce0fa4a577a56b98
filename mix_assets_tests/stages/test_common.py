"""stages/common.py: what every materialisation carries besides the stage's own metadata."""

import dagster as dg

from mix_assets.stages.common import with_lineage


def _vm_hwm_mb() -> float:
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1e3


def test_with_lineage_carries_the_process_peak_rss():
    lin = {"metadata": {"computed_from": dg.MetadataValue.json({})}, "data_version": dg.DataVersion("v")}
    big = b"\x01" * 200_000_000  # written, so resident
    res = with_lineage({"docs": 3}, lin)
    del big
    peak = res.metadata["peak_rss_mb"]
    assert peak >= 200 and abs(peak - _vm_hwm_mb()) < 5, (peak, _vm_hwm_mb())
    assert res.metadata["docs"] == 3 and "computed_from" in res.metadata
