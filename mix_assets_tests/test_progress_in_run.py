"""Progress lines written through context.log land in the run's event log (the UI's log view)."""

import dagster as dg

from mix_assets.core.progress import Progress


def test_progress_lines_reach_the_run_log():
    ticks = iter(range(0, 1000, 4))  # a fake clock: 4 s per update, interval 10 s -> a line every 3rd update

    @dg.asset
    def long_step(context: dg.AssetExecutionContext) -> None:
        p = Progress(context.log, "long_step", total_docs=12, total_bytes=12_000, interval=10,
                     clock=lambda: float(next(ticks)))
        for _ in range(12):
            p.update(docs=1, bytes=1000, tokens=250)
        p.done()

    with dg.instance_for_test() as instance:
        res = dg.materialize([long_step], instance=instance)
        lines = [r.user_message for r in instance.all_logs(res.run_id) if r.user_message.startswith("long_step:")]
    # updates at t=4..48: lines at t=12, 24, 36, 48, then the final line (read at t=52)
    assert len(lines) == 5, lines
    assert "3/12 docs, 3.00KB/12.00KB" in lines[0] and "25.0%, ETA 36.0s" in lines[0]
    assert lines[-1].endswith("done in 52.0s") and "12/12 docs" in lines[-1] and "0.231 docs/s" in lines[-1]
