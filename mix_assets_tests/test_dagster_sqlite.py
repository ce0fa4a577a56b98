"""mix_assets/dagster_sqlite.py: Dagster's SQLite event log without an fsync per commit."""

from __future__ import annotations

import sqlite3

import dagster as dg
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from mix_assets import dagster_sqlite


def _create(path, wal: bool) -> None:
    c = sqlite3.connect(path)  # closed, not only committed (`with` would keep it open)
    if wal:
        c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE t (x TEXT)")
    c.commit()
    c.close()


def _synchronous(engine) -> int:
    with engine.connect() as c:
        return c.exec_driver_sql("PRAGMA synchronous").scalar()


def test_wal_database_gets_normal_sync_and_a_rollback_journal_keeps_full(tmp_path):
    assert dagster_sqlite.install()
    wal, plain = tmp_path / "wal.db", tmp_path / "plain.db"
    _create(wal, wal=True)
    _create(plain, wal=False)
    e_wal = sa.create_engine(f"sqlite:///{wal}", poolclass=NullPool)
    e_plain = sa.create_engine(f"sqlite:///{plain}", poolclass=NullPool)
    assert _synchronous(e_wal) == 1  # NORMAL
    assert _synchronous(e_wal) == 1  # and again once the file is known to be WAL
    assert _synchronous(e_plain) == 2  # FULL, SQLite's default: a rollback journal is left alone


def test_each_close_still_checkpoints_into_the_database_file(tmp_path):
    """The webserver watches `<run_id>.db` for new events: every per-event close must still write it (the
    reverted hook held a connection open, so no close checkpointed and the UI missed the run's last events)."""
    assert dagster_sqlite.install()
    db = tmp_path / "events.db"
    _create(db, wal=True)
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=NullPool)
    for i in range(3):
        before = db.read_bytes()
        with engine.begin() as c:
            assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1
            c.exec_driver_sql("INSERT INTO t VALUES (?)", (str(i),))
        engine.dispose()
        assert db.read_bytes() != before  # checkpointed at the close
        wal = tmp_path / "events.db-wal"
        assert not wal.exists() or wal.stat().st_size == 0
    c = sqlite3.connect(db)
    assert c.execute("SELECT count(*) FROM t").fetchone()[0] == 3
    c.close()


def test_dagster_run_history_is_readable(tmp_path):
    assert dagster_sqlite.install()

    @dg.asset
    def one() -> int:
        """A trivial asset."""
        return 1

    instance = dg.DagsterInstance.local_temp(str(tmp_path))
    result = dg.materialize([one], instance=instance)
    assert result.success
    assert any(p.startswith(str(tmp_path)) and p.endswith(f"{result.run_id}.db") for p in dagster_sqlite._WAL)
    assert instance.get_latest_materialization_event(dg.AssetKey("one")) is not None
    assert {e.dagster_event.event_type_value for e in instance.all_logs(result.run_id)
            if e.dagster_event} >= {"STEP_START", "ASSET_MATERIALIZATION", "STEP_SUCCESS"}


def test_default_leaves_dagster_settings(monkeypatch):
    monkeypatch.setenv(dagster_sqlite.ENV, "default")
    assert not dagster_sqlite.install()
