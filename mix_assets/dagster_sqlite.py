"""Dagster's SQLite storages (a local instance's run history and event log) without fsyncs per event.

Dagster's SQLite storages open a connection for every event they store (SQLAlchemy NullPool) and close it
after one commit. In WAL mode (Dagster's), closing the last connection to a database checkpoints it
(fsyncs of the log and the database, then the log is removed), and with SQLite's default synchronous=FULL
every commit fsyncs the log too. bench/event_log.py measured 4 ms (load ~3) to 25 ms (load ~10) of wall saved
per stored event on a shared 2-core machine; a 100 MB build stores ~200 events (~700 connections), and its whole
graph showed no difference beyond run-to-run noise at load ~3 (bench/results/graph.md, branch i28-fixed).

`install()` registers a SQLAlchemy connect hook: each SQLite connection to a WAL database gets
`synchronous=NORMAL` (SQLite's recommended setting for WAL: an application crash loses nothing, a power
loss may lose the last commits, the database stays consistent), and the process keeps one idle connection
open to each such database (the last HOLD of them), so a stored event's close is not the last one and does
not checkpoint; SQLite still checkpoints as the log grows (wal_autocheckpoint) and when the process exits.
Nothing is read or written differently. Postgres instances (deploy/dagster.yaml) are untouched.
`MIX_DAGSTER_SQLITE=default` leaves Dagster's SQLite settings as they are.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import OrderedDict

ENV = "MIX_DAGSTER_SQLITE"
HOLD = 16  # databases held open per process (3 file descriptors each); older ones are closed
_HELD: "OrderedDict[str, sqlite3.Connection]" = OrderedDict()
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
            known = path in _HELD  # a WAL database seen before: no need to ask again
        if not known:
            mode = dbapi_connection.execute("PRAGMA journal_mode").fetchone()
            if not mode or str(mode[0]).lower() != "wal":
                return  # a rollback journal keeps SQLite's default (NORMAL there can corrupt on power loss)
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error:
        return  # Dagster's own statement reports a broken database
    if path:  # not an in-memory database
        hold(path)


def hold(path: str) -> None:
    """Keep one idle connection to the database at `path` open (no transaction: it holds no snapshot)."""
    with _LOCK:
        if path in _HELD:
            _HELD.move_to_end(path)
            return
        try:
            con = sqlite3.connect(path, check_same_thread=False)
            con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the file and its WAL index
        except sqlite3.Error:
            return
        _HELD[path] = con
        while len(_HELD) > HOLD:
            _HELD.popitem(last=False)[1].close()


def held() -> list[str]:
    """The databases held open now (for tests)."""
    with _LOCK:
        return list(_HELD)
