"""mix_assets/dagster_sqlite.py: Dagster's SQLite event log without an fsync per stored event."""

from __future__ import annotations

import sqlite3

import dagster as dg
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from mix_assets import dagster_sqlite


def _create(path, wal: bool) -> None:
    c = sqlite3.connect(path)  # closed, not only committed (`with` would keep it open: a holder of its own)
    if wal:
        c.execute("PRAGMA journal_mode=WAL")
    c.execute("CREATE TABLE t (x TEXT)")
    c.commit()
    c.close()


def _synchronous(engine) -> int:
    with engine.connect() as c:
        return c.exec_driver_sql("PRAGMA synchronous").scalar()


def test_wal_database_gets_normal_sync_and_is_held_open(tmp_path):
    assert dagster_sqlite.install()
    wal, plain = tmp_path / "wal.db", tmp_path / "plain.db"
    _create(wal, wal=True)
    _create(plain, wal=False)
    e_wal = sa.create_engine(f"sqlite:///{wal}", poolclass=NullPool)
    e_plain = sa.create_engine(f"sqlite:///{plain}", poolclass=NullPool)
    assert _synchronous(e_wal) == 1  # NORMAL
    assert _synchronous(e_plain) == 2  # FULL, SQLite's default: a rollback journal is left alone
    assert str(wal) in dagster_sqlite.held()
    assert str(plain) not in dagster_sqlite.held()


def test_closing_a_per_event_connection_keeps_the_wal(tmp_path):
    """The held connection makes a NullPool close not the last one: no checkpoint, the -wal file stays."""
    assert dagster_sqlite.install()
    db = tmp_path / "events.db"
    _create(db, wal=True)
    engine = sa.create_engine(f"sqlite:///{db}", poolclass=NullPool)
    for i in range(3):
        with engine.begin() as c:
            c.exec_driver_sql("INSERT INTO t VALUES (?)", (str(i),))
        engine.dispose()
    assert (tmp_path / "events.db-wal").exists()
    c = sqlite3.connect(db)
    assert c.execute("SELECT count(*) FROM t").fetchone()[0] == 3
    c.close()


def test_dagster_run_history_is_held_and_readable(tmp_path):
    assert dagster_sqlite.install()

    @dg.asset
    def one() -> int:
        """A trivial asset."""
        return 1

    instance = dg.DagsterInstance.local_temp(str(tmp_path))
    result = dg.materialize([one], instance=instance)
    assert result.success
    assert any(p.startswith(str(tmp_path)) and p.endswith(f"{result.run_id}.db") for p in dagster_sqlite.held())
    assert instance.get_latest_materialization_event(dg.AssetKey("one")) is not None
    assert {e.dagster_event.event_type_value for e in instance.all_logs(result.run_id)
            if e.dagster_event} >= {"STEP_START", "ASSET_MATERIALIZATION", "STEP_SUCCESS"}


def test_hold_keeps_the_last_few(tmp_path):
    for i in range(dagster_sqlite.HOLD + 3):
        db = tmp_path / f"d{i}.db"
        sqlite3.connect(db).close()
        dagster_sqlite.hold(str(db))
    held = dagster_sqlite.held()
    assert len(held) <= dagster_sqlite.HOLD
    assert str(tmp_path / f"d{dagster_sqlite.HOLD + 2}.db") in held
    assert str(tmp_path / "d0.db") not in held
