"""The run lease of a storage root (core/runlock.py) on a local directory and on S3 (SeaweedFS)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from mix_assets.core import runlock
from mix_assets.core.transport import LocalLocation, S3Location


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def loc(request, tmp_path):
    if request.param == "local":
        return LocalLocation(tmp_path / "root")
    seaweedfs = request.getfixturevalue("seaweedfs")
    return S3Location(seaweedfs.url("lease"), seaweedfs.client("writer"))


def _body(loc) -> dict:
    return json.loads(loc.read_bytes(runlock.LEASE_KEY))


def test_a_second_holder_fails_fast_naming_the_first(loc):
    a = runlock.acquire(loc, runlock.owner("run-A", "token_shards"), ttl=30)
    try:
        with pytest.raises(runlock.LeaseHeld) as e:
            runlock.acquire(loc, runlock.owner("run-B", "token_shards"), ttl=30)
        msg = str(e.value)
        assert "run run-A" in msg and "step token_shards" in msg and socket.gethostname() in msg
        assert f"pid {runlock.owner('x', 'y')['pid']}" in msg and "does not wait" in msg and loc.url in msg
        assert _body(loc)["owner"]["run_id"] == "run-A"
    finally:
        a.release()
    assert not loc.exists(runlock.LEASE_KEY)
    b = runlock.acquire(loc, runlock.owner("run-B", "token_shards"), ttl=30)  # free again
    b.release()


def test_a_heartbeat_keeps_the_lease_past_its_ttl_and_a_bounded_wait_then_gets_it(loc):
    a = runlock.acquire(loc, runlock.owner("run-A", "manifest"), ttl=0.6)
    first_beat = _body(loc)["heartbeat_at"]
    time.sleep(1.5)  # over twice the TTL: only the heartbeat thread keeps it live
    assert _body(loc)["heartbeat_at"] > first_beat
    with pytest.raises(runlock.LeaseHeld, match="after waiting 0 s"):
        runlock.acquire(loc, runlock.owner("run-B", "manifest"), ttl=0.6, wait_seconds=0.3, poll=0.1)
    threading.Timer(0.5, a.release).start()
    t0 = time.monotonic()
    b = runlock.acquire(loc, runlock.owner("run-B", "manifest"), ttl=5, wait_seconds=10, poll=0.1)
    assert 0.3 < time.monotonic() - t0 < 5 and _body(loc)["owner"]["run_id"] == "run-B"
    b.release()
    a.check()  # released cleanly, never lost


def test_a_stale_lease_is_taken_over_and_its_old_holder_learns_it(loc):
    lines = []
    a = runlock.acquire(loc, runlock.owner("run-A", "published_revision"), ttl=30)
    a._stop.set()  # as if run A's process hung: no more heartbeats
    a._thread.join()
    later = time.time() + 60  # its heartbeat is now older than its TTL
    b = runlock.acquire(loc, runlock.owner("run-B", "published_revision"), ttl=30, log=lines.append,
                        clock=lambda: later)
    assert _body(loc)["owner"]["run_id"] == "run-B"
    assert lines and "took over a stale lease of run run-A" in lines[0]
    assert not a.heartbeat() and "now held by run run-B" in a.lost
    a.release()  # a lost lease is not deleted: it is run B's now
    assert _body(loc)["owner"]["run_id"] == "run-B"
    b.release()


def test_holding_raises_at_exit_when_the_lease_was_taken_over_meanwhile(loc):
    with pytest.raises(runlock.LeaseLost, match="taken over; it is now held by run run-D"):
        with runlock.holding(loc, runlock.owner("run-C", "token_shards"), ttl=30) as c:
            other = {**c.body, "owner": runlock.owner("run-D", "token_shards"), "token": "other"}
            loc.put_bytes(runlock.LEASE_KEY, json.dumps(other).encode())  # run D took it over
            assert not c.heartbeat()
    assert _body(loc)["owner"]["run_id"] == "run-D"  # not deleted by the run that lost it


def test_two_runs_taking_over_one_stale_lease_one_wins(loc):
    stale = {"owner": {"run_id": "dead", "step": "s", "host": "elsewhere", "pid": 1}, "token": "t",
             "acquired_at": 0, "heartbeat_at": 0, "ttl_seconds": 1}
    loc.put_bytes(runlock.LEASE_KEY, json.dumps(stale).encode())
    got, errors, start = [], [], threading.Barrier(4)

    def contend(i):
        start.wait()
        try:
            got.append(runlock.acquire(loc, runlock.owner(f"run-{i}", "s"), ttl=30))
        except runlock.LeaseHeld as e:
            errors.append(str(e))

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 1 and len(errors) == 3, (got, errors)
    assert _body(loc)["owner"]["run_id"] == got[0].body["owner"]["run_id"]
    got[0].release()


def test_a_lease_of_a_dead_process_on_this_host_is_taken_after_half_its_ttl(tmp_path):
    loc = LocalLocation(tmp_path / "root")
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)
    now = time.time()

    def lease(pid, age):
        body = {"owner": {"run_id": f"pid-{pid}", "step": "token_shards", "host": socket.gethostname(), "pid": pid},
                "token": "t", "acquired_at": now - age, "heartbeat_at": now - age, "ttl_seconds": 600}
        loc.put_bytes(runlock.LEASE_KEY, json.dumps(body).encode())

    lease(dead_pid, age=5)  # a fresh heartbeat: maybe a live holder in another pid namespace, left alone
    with pytest.raises(runlock.LeaseHeld, match=f"pid-{dead_pid}"):
        runlock.acquire(loc, runlock.owner("next", "token_shards"), ttl=30)
    lease(runlock.owner("x", "y")["pid"], age=400)  # older than TTL/2, but its process (this one) is alive
    with pytest.raises(runlock.LeaseHeld):
        runlock.acquire(loc, runlock.owner("next", "token_shards"), ttl=30)
    lease(dead_pid, age=400)  # older than TTL/2 and its process is gone: no need to wait for the TTL
    b = runlock.acquire(loc, runlock.owner("next", "token_shards"), ttl=30)
    assert _body(loc)["owner"]["run_id"] == "next"
    b.release()
