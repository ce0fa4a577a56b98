from mix_assets.core.progress import Progress, duration, human


class _Log:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)


class _Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_logs_at_steady_interval_not_per_update():
    log, clock = _Log(), _Clock()
    p = Progress(log, "tokenize", total_docs=1000, total_bytes=4_000_000, interval=10, clock=clock)
    for _ in range(100):  # 100 updates over 50 s -> one line per 10 s
        clock.t += 0.5
        p.update(docs=10, bytes=40_000, tokens=10_000)
    assert len(log.lines) == 5
    first = log.lines[0]
    # after 10 s: 200 docs of 1000, 800 KB of 4 MB, 20% done, 40 s to go
    assert first.startswith("tokenize: 200/1.00K docs, 800.00KB/4.00MB, 200.00K tokens")
    assert "20 docs/s" in first and "80.00KB/s" in first and "20.00K tokens/s" in first
    assert "20.0%, ETA 40.0s" in first and "elapsed 10.0s" in first
    final = p.done()
    assert final == log.lines[-1] and "done in 50.0s" in final and "1.00K/1.00K docs" in final


def test_eta_without_totals_and_formatting():
    log, clock = _Log(), _Clock()
    p = Progress(log, "scan", interval=1, clock=clock)
    clock.t += 2
    assert p.update(docs=3)
    assert "ETA" not in log.lines[0] and "3 docs" in log.lines[0]
    assert human(999) == "999" and human(1500, "B") == "1.50KB" and human(2.5e9) == "2.50G"
    assert human(0.25) == "0.25" and human(12.0) == "12"
    assert duration(5.25) == "5.2s" and duration(125) == "2m05s" and duration(3723) == "1h02m03s"


def test_rejects_non_positive_interval():
    import pytest

    with pytest.raises(ValueError, match="interval must be > 0"):
        Progress(_Log(), "x", interval=0)


def test_rows_not_docs_no_tokens_when_none_counted_and_the_outcome_on_the_last_line():
    log, clock = _Log(), _Clock()
    p = Progress(log, "raw/web", item="rows", interval=10, clock=clock)
    p.update(docs=300, bytes=465_000)
    final = p.done("kept 243 documents (57 dropped), 75,545 est. tokens")
    assert final.startswith("raw/web: 300 rows, 465.00KB | ") and "rows/s" in final
    assert "0 tokens" not in final and " docs" not in final
    assert final.endswith("| kept 243 documents (57 dropped), 75,545 est. tokens")
