"""Checkouts: where a run's working files live, so that runs on one storage root never write each other's.

A checkout is a folder of working paths (raw/, dedup/, ..., mix/, lineage/, parts/: every key of
core/layout.py). The storage root itself is the `main` checkout, the one a user reads (`<root>/mix/`); other
checkouts are `checkouts/<name>/` under the root. Every checkout shares the root's object store and keyed
records (objects/, keyed/: core/objects.py) and its locks/, so an artifact computed in one is restored into
another by its key (stages/common.reused, stages/common.verified_inputs), never recomputed.

A run works in `main` unless another live run does; then in `checkouts/cfg-<config id>`, and when a run of the
same config holds that one too, in `checkouts/run-<run id>`. A run holds its checkout by a claim file

    locks/checkouts/<name>/<run id>.<pid>.<token>.json   {run_id, host, pid, created, heartbeat_at, ttl_seconds}

written before it looks at the others (create, then list): of two runs claiming one checkout at once the one
whose claim is older ((created, run id) order) keeps it, the other withdraws, so at most one run uses a
checkout. A run's later steps try the checkout its previous step worked in first (`locks/checkouts/.runs/<run
id>`), so under the multiprocess executor a run does not move between checkouts while they stay free. A claim is rewritten every TTL/4 while held and deleted on release (Dagster's in-process executor
holds it for the whole run: the resource's lifetime; the multiprocess executor for each step, the run's
steps sharing it by run id). A claim whose heartbeat is older than its TTL is dead; one whose process is
gone on this host is waited for until it is TTL/2 old (as the run lease, core/runlock.py: a container sharing
the host name has its own pids), so the next run on the host resumes the killed run's parts in `main`.
No dagster here: `mix_assets/resources.MixResource` claims one for each run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Optional

from mix_assets.core import runlock

MAIN = "main"
CHECKOUTS = "checkouts"  # <root>/checkouts/<name>/: the checkouts other than main
CLAIMS = "locks/checkouts"  # <root>/locks/checkouts/<name>/<run id>.<pid>.<token>.json


def prefix(name: str) -> str:
    """The folder of checkout `name` under the storage root ("" for main)."""
    return "" if name == MAIN else f"{CHECKOUTS}/{name}"


def config_id(config_json: str) -> str:
    """A short name for a config (its canonical JSON): the checkout runs of that config share."""
    return hashlib.sha256(config_json.encode("utf-8")).hexdigest()[:12]


def candidates(run_id: str, cfg: str, last: Optional[str] = None) -> list[str]:
    """The checkouts a run tries, in order: first the one its previous step worked in (`last`)."""
    names = [MAIN, f"cfg-{cfg}", f"run-{run_id}"]
    return [last, *(n for n in names if n != last)] if last in names else names


def _last_key(run_id: str) -> str:
    return f"{CLAIMS}/.runs/{run_id}"  # the checkout a run's steps worked in last (multiprocess: one claim a step)


@dataclass
class Claim:
    """A held claim on checkout `name`; `release()` deletes it."""

    store: object  # core/storage.Storage of the storage root
    name: str
    key: str
    body: dict
    ttl: float
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: Optional[threading.Thread] = field(default=None, repr=False)

    @property
    def prefix(self) -> str:
        return prefix(self.name)

    def _beat(self) -> None:
        while not self._stop.wait(max(self.ttl / 4, 0.05)):
            try:
                self.body = {**self.body, "heartbeat_at": time.time()}
                self.store.write_bytes(self.key, _encode(self.body))
            except Exception:  # noqa: BLE001 - a transient store error: the next beat tries again
                continue

    def start(self) -> "Claim":
        self._thread = threading.Thread(target=self._beat, daemon=True, name="mix-checkout-claim")
        self._thread.start()
        return self

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.store.delete(self.key)


def _encode(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True).encode("utf-8") + b"\n"


def _claims(store, name: str) -> list[tuple[str, dict]]:
    out = []
    for k in store.list(f"{CLAIMS}/{name}"):
        if not k.endswith(".json"):
            continue
        try:
            body = json.loads(store.read_bytes(k))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            continue  # released meanwhile, or half a write of another store: not a live claim
        if isinstance(body, dict):
            out.append((k, body))
    return out


def _order(body: dict) -> tuple:
    return float(body.get("created", 0)), str(body.get("run_id"))


def _dying(body: dict) -> bool:
    """Its process is gone on this host: dead once TTL/2 old (runlock.is_stale), waited for until then."""
    return body.get("host") == socket.gethostname() and runlock._pid_gone(body.get("pid"))


def claim(store, run_id: str, cfg: str, *, ttl: float = runlock.DEFAULT_TTL, poll: float = 0.5,
          log: Callable[[str], None] = lambda s: None, clock: Callable[[], float] = time.time) -> Claim:
    """Claim the first checkout of `candidates(run_id, cfg)` that no other live run holds (see the module doc)."""
    try:
        last = store.read_text(_last_key(run_id)).strip()
    except (FileNotFoundError, UnicodeDecodeError):
        last = None
    names = candidates(run_id, cfg, last)
    waited = False
    for i, name in enumerate(names):
        while True:
            now = clock()
            body = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(), "created": now,
                    "heartbeat_at": now, "ttl_seconds": ttl}
            key = f"{CLAIMS}/{name}/{run_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}.json"
            store.write_bytes(key, _encode(body))
            others = [(k, b) for k, b in _claims(store, name)
                      if k != key and b.get("run_id") != run_id and not runlock.is_stale(b, now)]
            older = [b for _, b in others if _order(b) <= _order(body)]
            if not older or i == len(names) - 1:
                for k, b in _claims(store, name):
                    if k != key and b.get("run_id") != run_id and runlock.is_stale(b, now):
                        log(f"checkout {name}: removed the dead claim of run {b.get('run_id')} (pid {b.get('pid')})")
                        store.delete(k)
                if name != MAIN and name == last:
                    log(f"checkout {name} ({prefix(name)}/): where this run's previous step worked")
                elif name != MAIN:
                    log(f"checkout {name} ({prefix(name)}/): {MAIN} is in use by "
                        + ", ".join(sorted({str(b.get('run_id')) for _, b in _claims(store, MAIN)
                                            if b.get('run_id') != run_id}) or ["another run"]))
                if name != last:
                    store.write_text(_last_key(run_id), name)
                return Claim(store, name, key, body, ttl).start()
            store.delete(key)
            if all(_dying(b) for b in older):  # a killed run on this host: it is dead at TTL/2
                if not waited:
                    log(f"checkout {name}: waiting for the claim of run {older[0].get('run_id')} (pid "
                        f"{older[0].get('pid')}, gone) to go stale")
                    waited = True
                time.sleep(poll)
                continue
            break
    raise AssertionError("unreachable: the last candidate is always claimed")


def hold(store, name: str, run_id: str, *, ttl: float = runlock.DEFAULT_TTL,
         clock: Callable[[], float] = time.time) -> Optional[Claim]:
    """Claim exactly checkout `name` when no other live claim is on it (older or younger), else None; gc
    holds a checkout so while it removes it: a run claiming it meanwhile sees the older claim and moves on."""
    now = clock()
    body = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(), "created": now,
            "heartbeat_at": now, "ttl_seconds": ttl}
    key = f"{CLAIMS}/{name}/{run_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}.json"
    store.write_bytes(key, _encode(body))
    if any(k != key and b.get("run_id") != run_id and not runlock.is_stale(b, now) for k, b in _claims(store, name)):
        store.delete(key)
        return None
    return Claim(store, name, key, body, ttl).start()


def live_claims(store, name: str, now: Optional[float] = None) -> list[dict]:
    """The claims on checkout `name` that are not stale (a run holds it)."""
    now = time.time() if now is None else now
    return [b for _, b in _claims(store, name) if not runlock.is_stale(b, now)]


@contextlib.contextmanager
def holding(store, run_id: str, cfg: str, **kw) -> Iterator[Claim]:
    """`claim`, yield it, release it."""
    c = claim(store, run_id, cfg, **kw)
    try:
        yield c
    finally:
        c.release()
