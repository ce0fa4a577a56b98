"""A throw-away PostgreSQL server for tests (Debian `postgresql` package, no network).

`postgres` refuses to run as root, so under root the server runs as a system user `mixpg` (created
once, no home, no shell) through `runuser`. The cluster lives in a fresh directory under /tmp with
trust authentication on 127.0.0.1 only, fsync off, and is stopped and deleted on exit.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PG_USER = "mixpg"


def pg_bindir() -> str | None:
    """The newest /usr/lib/postgresql/<v>/bin holding initdb and pg_ctl, else None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    return str(Path(found[-1]).parent) if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class PgServer:
    host: str
    port: int
    user: str
    db: str

    @property
    def env(self) -> dict[str, str]:
        """The variables deploy/dagster.yaml reads."""
        return {"DAGSTER_PG_HOST": self.host, "DAGSTER_PG_PORT": str(self.port),
                "DAGSTER_PG_USER": self.user, "DAGSTER_PG_PASSWORD": "", "DAGSTER_PG_DB": self.db}


def _as_pg_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    if subprocess.run(["id", "-u", PG_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
                       check=True, capture_output=True)
    return ["runuser", "-u", PG_USER, "--", *cmd]


def _run(cmd: list[str], what: str) -> None:
    p = subprocess.run(_as_pg_user(cmd), capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"{what} failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")


@contextlib.contextmanager
def postgres_server(db: str = "dagster") -> Iterator[PgServer]:
    bindir = pg_bindir()
    if bindir is None:
        raise FileNotFoundError("no /usr/lib/postgresql/*/bin/initdb: run scripts/install_system_deps.sh")
    base = Path(tempfile.mkdtemp(prefix="mixpg-"))
    base.chmod(0o755)
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        _as_pg_user(["true"])  # creates the user
        shutil.chown(base, PG_USER)
        shutil.chown(sock, PG_USER)
    port = free_port()
    started = False
    try:
        _run([f"{bindir}/initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
              "--no-sync", "--no-instructions"], "initdb")
        _run([f"{bindir}/pg_ctl", "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "60",
              "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off "
                    "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100",
              "start"], "pg_ctl start")
        started = True
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{db}"')
        conn.close()
        yield PgServer("127.0.0.1", port, "postgres", db)
    finally:
        if started:
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                _run([f"{bindir}/pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"], "pg_ctl stop")
        shutil.rmtree(base, ignore_errors=True)
