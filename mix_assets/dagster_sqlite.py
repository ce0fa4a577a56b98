"""Dagster's SQLite storages (a local instance's run history and event log) without an fsync per commit.

Dagster's SQLite storages open a connection for every event they store (SQLAlchemy NullPool) and close it
after its commits. In WAL mode (Dagster's) with SQLite's default synchronous=FULL every commit fsyncs the log,
and closing the last connection checkpoints the database (fsyncs of the log and the database, then the log is
removed). `install()` registers a SQLAlchemy connect hook: each SQLite connection to a WAL database gets
`synchronous=NORMAL` (SQLite's recommended setting for WAL: an application crash loses nothing, a power loss
may lose the last commits, the database stays consistent), so a commit no longer fsyncs. Each close still
checkpoints, so the run's `<run_id>.db` file changes after every stored event as before and the webserver's
event watcher sees it (a version that also held a connection open, so that no close checkpointed, hid the
run's last events from the UI and was reverted: 04b714c). Nothing is read or written differently.
Rollback-journal databases keep SQLite's default; Postgres instances (deploy/dagster.yaml) are untouched.
`MIX_DAGSTER_SQLITE=default` leaves Dagster's SQLite settings as they are. Measured: bench/event_log.py.
"""

from __future__ import annotations

import os
import sqlite3
import threading

ENV = "MIX_DAGSTER_SQLITE"
_WAL: set[str] = set()  # database files seen in WAL mode (no need to ask them again)
_LOCK = threading.Lock()
_INSTALLED = False


def install() -> bool:
    """Register the hook once per process (True when it is on)."""
    global _INSTALLED
    if os.environ.get(ENV, "").strip().lower() == "default":
        return False
    with _LOCK:
        if not _INSTALLED:
            from sqlalchemy import event
            from sqlalchemy.engine import Engine

            event.listen(Engine, "connect", _on_connect)
            _INSTALLED = True
    return True


def _on_connect(dbapi_connection, _record) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    try:
        files = [row[2] for row in dbapi_connection.execute("PRAGMA database_list") if row[1] == "main"]
        path = files[0] if files else ""
        with _LOCK:
            known = path in _WAL
        if not known:
            mode = dbapi_connection.execute("PRAGMA journal_mode").fetchone()
            if not mode or str(mode[0]).lower() != "wal":
                return  # a rollback journal keeps SQLite's default (NORMAL there can corrupt on power loss)
            if path:  # not an in-memory database
                with _LOCK:
                    _WAL.add(path)
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error:
        return  # Dagster's own statement reports a broken database
