"""A real two-node Ray cluster on this machine for a test: two `ray start --block` processes (head and
worker), each with its own --temp-dir, 1 CPU and ports chosen free, and a watch on every task worker.

`two_node_cluster(folder, env)` starts them (each in its own process session), waits until both nodes
are alive and yields the GCS address; on exit (failure included) it stops both by their process groups.
Never `ray stop`: that kills every Ray process on the machine, other users' clusters included.

`watch_worker` is a Ray `worker_process_setup_hook` (give it in the driver's runtime_env): in each task
worker it installs an audit hook that refuses (PermissionError) opening any path under
$MIX_TEST_FORBIDDEN (os.pathsep-separated: the driver's own folders) and notes, in
$MIX_TEST_LEDGER/<node name>-<pid>.txt, every connection to $MIX_TEST_S3_PORT (the storage) and every
refused path. The node name is the MIX_TEST_NODE each `ray start` got in its environment (its raylet
passes it to the workers it starts).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from mix_assets_tests.support.s3server import _free_ports as free_ports

NODE_VAR, FORBIDDEN_VAR, LEDGER_VAR, S3_PORT_VAR = "MIX_TEST_NODE", "MIX_TEST_FORBIDDEN", "MIX_TEST_LEDGER", "MIX_TEST_S3_PORT"
NODES = ("head", "worker")


def ray_binary() -> str:
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else "ray"


def _start(name: str, folder: Path, short: Path, env: dict, gcs: int, client_port: int) -> subprocess.Popen:
    temp = short / name  # a short path: Ray's unix sockets live under it (107-byte limit)
    temp.mkdir()
    p = free_ports(6)
    cmd = [ray_binary(), "start", "--block", "--num-cpus=1", f"--temp-dir={temp}", "--node-ip-address=127.0.0.1",
           f"--node-manager-port={p[0]}", f"--object-manager-port={p[1]}", f"--runtime-env-agent-port={p[2]}",
           f"--metrics-export-port={p[3]}", f"--dashboard-agent-listen-port={p[4]}",
           f"--dashboard-agent-grpc-port={p[5]}", f"--object-store-memory={100 << 20}", "--disable-usage-stats"]
    if name == "head":
        cmd += ["--head", f"--port={gcs}", "--include-dashboard=false", f"--ray-client-server-port={client_port}"]
    else:
        cmd += [f"--address=127.0.0.1:{gcs}"]
    log = open(folder / f"ray-{name}.log", "wb")
    try:
        return subprocess.Popen(cmd, env={**env, NODE_VAR: name}, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        log.close()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        with contextlib.suppress(ProcessLookupError):  # its raylet and workers may outlive it in the group
            os.killpg(proc.pid, signal.SIGKILL)
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):  # whatever is left of this node's process group
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@contextlib.contextmanager
def two_node_cluster(folder: Path, env: dict, timeout: float = 60.0):
    """Head + worker, 1 CPU each; yields "127.0.0.1:<gcs port>" once `ray.nodes()` would list both alive
    (checked by the caller's driver: this only waits for the GCS port and the processes). `env` is the
    nodes' whole environment (PYTHONPATH, credentials, auth token)."""
    folder.mkdir(parents=True, exist_ok=True)
    short = Path(tempfile.mkdtemp(prefix="mixray-", dir="/tmp"))  # pytest's tmp_path is too long for sockets
    gcs, client_port = free_ports(2)
    procs: list[subprocess.Popen] = []
    try:
        procs.append(_start("head", folder, short, env, gcs, client_port))
        deadline = time.monotonic() + timeout
        while True:  # the worker node needs the head's GCS up
            if procs[0].poll() is not None:
                raise RuntimeError(f"ray start --head exited {procs[0].returncode}: "
                                   f"{(folder / 'ray-head.log').read_text(errors='replace')[-2000:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", gcs), timeout=1):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the head's GCS did not listen on {gcs} within {timeout} s")
            time.sleep(0.3)
        procs.append(_start("worker", folder, short, env, gcs, client_port))
        yield f"127.0.0.1:{gcs}"
    finally:
        for p in reversed(procs):
            _stop(p)
        shutil.rmtree(short, ignore_errors=True)


def wait_for_nodes(ray, n: int, timeout: float = 60.0) -> list[dict]:
    """The alive nodes, once there are `n` of them (TimeoutError naming what is up otherwise)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [x for x in ray.nodes() if x["Alive"]]
        if len(alive) >= n:
            return alive
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(alive)} Ray node(s) alive after {timeout} s, expected {n}")
        time.sleep(0.5)


# -- in each task worker -----------------------------------------------------------------------------
_busy = threading.local()


def watch_worker() -> None:
    """Ray worker_process_setup_hook: refuse and note opening the driver's files, note S3 connections."""
    node = os.environ.get(NODE_VAR, "?")
    forbidden = tuple(os.path.realpath(p) + os.sep for p in os.environ.get(FORBIDDEN_VAR, "").split(os.pathsep) if p)
    ledger = Path(os.environ[LEDGER_VAR]) / f"{node}-{os.getpid()}.txt"
    s3_port = int(os.environ.get(S3_PORT_VAR, "0"))

    def note(line: str) -> None:
        _busy.on = True
        try:
            with open(ledger, "a") as fh:
                fh.write(line + "\n")
        finally:
            _busy.on = False

    def hook(event: str, args) -> None:
        if getattr(_busy, "on", False):
            return
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path.startswith(forbidden):
                note(f"refused {path}")
                raise PermissionError(f"node {node}: a task opened the driver's local file {path}")
        elif event == "socket.connect" and len(args) > 1 and isinstance(args[1], tuple) and len(args[1]) >= 2:
            if args[1][1] == s3_port:
                note(f"s3 {args[1][0]}:{args[1][1]}")

    note("started")
    sys.addaudithook(hook)


@contextlib.contextmanager
def driver_token(token: str):
    """This process authenticates to the cluster with `token` (Ray 2.60's token mode) for the block, then
    goes back to its previous settings. Ray caches the mode and the token at its first use in a process
    (another test's local instance), so both caches are refreshed on the way in and out."""
    from ray._raylet import AuthenticationTokenLoader, Config

    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
