"""A lease per storage root: only one run at a time writes `mix/` or publishes from it.

The lease is one small JSON object, `locks/run.lease` under the storage root:

    {"owner": {"run_id", "step", "host", "pid"}, "token", "acquired_at", "heartbeat_at", "ttl_seconds"}

* acquire: create it if absent (local `link()`, S3 `PutObject If-None-Match: *`); when it exists and is
  live, wait up to `wait_seconds` (0: fail at once) polling, then raise LeaseHeld naming the holder;
* a lease is stale when its heartbeat is older than its TTL, or older than half of it while its owner ran
  on this host and that pid is gone (not at once: a container sharing the host name has its own pids,
  and a live holder's heartbeat is never older than TTL/4): it is taken over by compare-and-swap on the version read (local: a flock-guarded compare and
  rename, S3: `PutObject If-Match: <ETag>`), so of two runs taking over the same stale lease one wins;
* while held, a daemon thread rewrites the heartbeat every TTL/4 (again by compare-and-swap); if the
  lease was taken over meanwhile (this process stalled past the TTL) the holder learns it at release and
  raises LeaseLost: what the step wrote may be mixed with another run's writes;
* release deletes it only if it is still this holder's version (S3 `DeleteObject If-Match`).

SeaweedFS (4.48, the tests' S3 server on loopback, checked by mix_assets_tests/core/test_runlock.py) and AWS S3 honour
those conditional requests (412 when they do not hold). A server that answers 501 to If-Match fails the
lease with a NotImplementedError naming it rather than locking unsafely; one that answers 501 to
If-None-Match gets `create_if_absent`'s check-then-put fallback (transport.py), which two runs starting in
the same instant could both pass: the takeover and heartbeat, by If-Match, still fail on such a server.
No dagster here: the assets decide which steps hold it (see `mix_assets/stages/common.run_lock`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from mix_assets.core.transport import Location

LEASE_KEY = "locks/run.lease"
DEFAULT_TTL = 60.0


class LeaseHeld(RuntimeError):
    """Another run holds the storage root's lease (the message names it)."""


class LeaseLost(RuntimeError):
    """This holder's lease was taken over before it released it."""


def describe(lease: dict, now: float | None = None) -> str:
    """One line naming a lease's holder, e.g. for LeaseHeld."""
    o = lease.get("owner", {})
    now = time.time() if now is None else now
    beat = now - float(lease.get("heartbeat_at", 0))
    return (f"run {o.get('run_id')} (step {o.get('step')}, host {o.get('host')}, pid {o.get('pid')}), "
            f"acquired {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(float(lease.get('acquired_at', 0))))} UTC, "
            f"last heartbeat {beat:.0f} s ago (TTL {float(lease.get('ttl_seconds', 0)):.0f} s)")


def _pid_gone(pid: object) -> bool:
    try:
        os.kill(int(pid), 0)  # type: ignore[arg-type]
    except ProcessLookupError:
        return True
    except (PermissionError, TypeError, ValueError):
        return False
    return False


def is_stale(lease: dict, now: float | None = None, host: str | None = None) -> bool:
    """True when the lease may be taken over: heartbeat older than its TTL, or older than TTL/2 with its
    process gone on this host."""
    now = time.time() if now is None else now
    try:
        age, ttl = now - float(lease["heartbeat_at"]), float(lease["ttl_seconds"])
    except (KeyError, TypeError, ValueError):
        return True  # unreadable: nobody can heartbeat it
    if age > ttl:
        return True
    o = lease.get("owner", {})
    return age > ttl / 2 and o.get("host") == (host or socket.gethostname()) and _pid_gone(o.get("pid"))


@dataclass
class Lease:
    """A held lease; `check()` raises LeaseLost if it was taken over."""

    loc: Location
    key: str
    body: dict
    version: str
    ttl: float
    lost: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def heartbeat(self) -> bool:
        """Refresh the heartbeat; False (and `lost` set) when the lease is no longer this holder's."""
        with self._guard:
            if self.lost:
                return False
            body = {**self.body, "heartbeat_at": time.time()}
            data = _encode(body)
            if self.loc.put_if_match(self.key, data, self.version):
                version = _ours(self.loc, self.key, body["token"])
                if version is not None:
                    self.body, self.version = body, version
                    return True
            cur = self.loc.read_versioned(self.key)
            holder = describe(_decode(cur[0])) if cur else "nobody (the lease was deleted)"
            self.lost = f"{self.loc.uri(self.key)}: this run's lease was taken over; it is now held by {holder}"
            return False

    def check(self) -> None:
        if self.lost:
            raise LeaseLost(self.lost)

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                if not self.heartbeat():
                    return
            except Exception:  # noqa: BLE001 -- a transient store error: try again at the next beat
                continue

    def start(self) -> None:
        self._thread = threading.Thread(target=self._beat, args=(max(self.ttl / 4, 0.05),), daemon=True,
                                        name="mix-run-lease")
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._guard:
            if not self.lost:
                self.loc.delete_if_match(self.key, self.version)


def _encode(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True).encode("utf-8") + b"\n"


def _decode(data: bytes) -> dict:
    try:
        out = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return out if isinstance(out, dict) else {}


def _ours(loc: Location, key: str, token: str) -> str | None:
    """The lease's version when it holds `token` (this holder's write is the one there), else None."""
    got = loc.read_versioned(key)
    return got[1] if got is not None and _decode(got[0]).get("token") == token else None


def owner(run_id: str, step: str) -> dict:
    """The owner record of this process's step of `run_id`."""
    return {"run_id": run_id, "step": step, "host": socket.gethostname(), "pid": os.getpid()}


def acquire(loc: Location, who: dict, *, ttl: float = DEFAULT_TTL, wait_seconds: float = 0.0,
            poll: float = 1.0, key: str = LEASE_KEY, log: Callable[[str], None] = lambda s: None,
            clock: Callable[[], float] = time.time) -> Lease:
    """Take the lease of `loc` for `who` (see the module doc); LeaseHeld naming the holder when it stays busy."""
    if ttl <= 0 or wait_seconds < 0:
        raise ValueError(f"run lease: ttl {ttl} must be > 0 and wait_seconds {wait_seconds} >= 0")
    deadline = time.monotonic() + wait_seconds
    waited = False
    while True:
        now = clock()
        body = {"owner": who, "token": uuid.uuid4().hex, "acquired_at": now, "heartbeat_at": now,
                "ttl_seconds": ttl}
        data = _encode(body)
        if loc.create_if_absent(key, data):
            version = _ours(loc, key, body["token"])
            if version is not None:
                return _started(Lease(loc, key, body, version, ttl))
            continue  # gone or replaced at once: look again
        cur = loc.read_versioned(key)
        if cur is None:
            continue  # released between the two calls
        held = _decode(cur[0])
        if is_stale(held, now):
            if loc.put_if_match(key, data, cur[1]):
                version = _ours(loc, key, body["token"])
                if version is not None:
                    log(f"{loc.uri(key)}: took over a stale lease of {describe(held, now)}")
                    return _started(Lease(loc, key, body, version, ttl))
            continue  # another run took it over first: look again
        if time.monotonic() >= deadline:
            how = f"after waiting {wait_seconds:.0f} s" if waited else "and this run does not wait"
            raise LeaseHeld(
                f"{loc.uri(key)}: the storage root {loc.url} is in use by {describe(held, now)}; {how} "
                f"(MIX_LOCK_WAIT_SECONDS sets how long a run waits; a lease whose heartbeat is older than its "
                f"TTL is taken over)")
        if not waited:
            log(f"{loc.uri(key)}: waiting up to {wait_seconds:.0f} s for {describe(held, now)}")
            waited = True
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def _started(lease: Lease) -> Lease:
    lease.start()
    return lease


@contextlib.contextmanager
def holding(loc: Location, who: dict, **kw) -> Iterator[Lease]:
    """`acquire`, yield the lease, release it; LeaseLost at exit when it was taken over meanwhile."""
    lease = acquire(loc, who, **kw)
    try:
        yield lease
    finally:
        lease.release()
    lease.check()
