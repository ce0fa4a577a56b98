"""core/checkout.py: which checkout a run works in, so two live runs never share one; on a local root and on S3
(SeaweedFS on loopback: claims are objects there, written and listed through the same Storage calls)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from mix_assets.core import checkout
from mix_assets.core.storage import Storage
from mix_assets_tests.support.s3server import WRITER


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request, tmp_path, monkeypatch) -> Storage:
    """An empty storage root: a local folder, or a fresh prefix on the SeaweedFS server."""
    if request.param == "local":
        return Storage(str(tmp_path / "root"))
    seaweedfs = request.getfixturevalue("seaweedfs")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", WRITER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", WRITER[1])
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    return Storage(seaweedfs.url("checkout"), s3_endpoint_url=seaweedfs.endpoint, cache_dir=str(tmp_path / "cache"))


def _other(store: Storage, name: str, run_id: str, *, age: float = 0.0, pid: int | None = None, ttl: float = 600.0,
           created: float | None = None) -> None:
    """A claim of another run on checkout `name`, its heartbeat `age` seconds old."""
    now = time.time()
    body = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid() if pid is None else pid,
            "created": (now - age) if created is None else created, "heartbeat_at": now - age, "ttl_seconds": ttl}
    store.write_text(f"{checkout.CLAIMS}/{name}/{run_id}.1.x.json", json.dumps(body))


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_live_runs_get_checkouts_of_their_own_and_a_released_main_is_taken_again(store):
    a = checkout.claim(store, "run-a", "cfg1")
    assert (a.name, a.prefix) == ("main", "")
    b = checkout.claim(store, "run-b", "cfg2")
    assert (b.name, b.prefix) == ("cfg-cfg2", "checkouts/cfg-cfg2")
    c = checkout.claim(store, "run-c", "cfg2")  # the same config while its checkout is in use
    assert c.name == "run-run-c"
    a2 = checkout.claim(store, "run-a", "cfg1")  # another step of run-a: the run shares its checkout
    assert a2.name == "main"
    for x in (a, a2, b, c):
        x.release()
    assert [k for k in store.list(checkout.CLAIMS) if k.endswith(".json")] == []  # every claim released
    d = checkout.claim(store, "run-d", "cfg2")
    assert d.name == "main"
    d.release()


def test_of_two_claims_made_at_once_the_older_keeps_main(store):
    _other(store, "main", "run-younger", created=time.time() + 5)  # claimed after us: it withdraws, not us
    mine = checkout.claim(store, "run-older", "cfg1")
    assert mine.name == "main"
    mine.release()
    _other(store, "main", "run-older-still", created=time.time() - 5)
    later = checkout.claim(store, "run-later", "cfg1")
    assert later.name == "cfg-cfg1"
    later.release()


def test_a_dead_claim_is_removed_and_a_killed_runs_is_waited_for_on_its_host(store):
    _other(store, "main", "run-long-dead", age=3600.0, ttl=60.0)  # heartbeat older than its TTL
    said = []
    c = checkout.claim(store, "run-a", "cfg1", log=said.append)
    assert c.name == "main" and any("removed the dead claim of run run-long-dead" in s for s in said)
    c.release()
    # killed on this host just now: the next run waits until its claim is TTL/2 old, then takes main (and resumes
    # the killed run's parts there) rather than start afresh in a checkout of its own
    _other(store, "main", "run-killed", age=0.0, ttl=2.0, pid=_dead_pid())
    said.clear()
    c = checkout.claim(store, "run-b", "cfg1", log=said.append, poll=0.1)
    assert c.name == "main"
    assert any("waiting for the claim of run run-killed" in s for s in said)
    c.release()


def test_a_held_claim_is_kept_fresh(store):
    c = checkout.claim(store, "run-a", "cfg1", ttl=1.0)
    first = json.loads(store.read_text(c.key))["heartbeat_at"]
    time.sleep(1.5)  # past its TTL: only the heartbeat keeps it live
    assert json.loads(store.read_text(c.key))["heartbeat_at"] > first
    b = checkout.claim(store, "run-b", "cfg1", ttl=1.0)
    assert b.name == "cfg-cfg1"
    for x in (b, c):
        x.release()


def test_a_runs_next_step_stays_in_the_checkout_its_last_step_worked_in(store):
    """The multiprocess executor claims once a step: a run whose first step went to its config's checkout
    (main was busy) keeps working there when main frees up, rather than move back and restore its inputs."""
    other = checkout.claim(store, "run-other", "cfg1")
    step1 = checkout.claim(store, "run-a", "cfg2")
    assert step1.name == "cfg-cfg2"
    step1.release()
    other.release()
    step2 = checkout.claim(store, "run-a", "cfg2")  # main is free now
    assert step2.name == "cfg-cfg2"
    step2.release()
    b = checkout.claim(store, "run-b", "cfg2")
    assert b.name == "main"  # a new run still starts in the root
    b.release()
