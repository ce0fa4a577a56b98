"""Map a pure function over bounded chunks, in this process or as Ray tasks (no Dagster here).

One code path, two engines: `map_chunks(fn, chunks, engine)` yields `fn(chunk)` for every chunk IN
CHUNK ORDER, whatever the engine, the worker count or the order tasks finish in, so a reduce over
the results writes the same bytes with 1, 2 or N workers, in-process or on Ray.

- `local`: a plain loop (num_cpus 1) or a thread pool of `num_cpus` threads in this process.
- `ray`: one Ray task per chunk (`num_cpus=1`, retried `max_retries` times on system failures, so
  `fn` must be pure; any picklable callable, e.g. a `functools.partial` with its fixed arguments,
  shipped once through the object store); at most `window` tasks are pending, results are taken
  in submission order.
  Ray must already be connected (the Dagster resource `EngineResource`, or `ray_session` below);
  `ray` is imported only here, so the in-process engine never pays for it.

Chunks are the caller's: bounded units of input (row ranges of a Parquet file, `chunk_rows` from
config), never derived from the worker count.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TypeVar
from urllib.parse import urlsplit

import pyarrow.parquet as pq

from mix_assets.core import transport

C = TypeVar("C")
R = TypeVar("R")

KINDS = ("local", "ray")
# Ray workers: one thread per task for the Rust/BLAS pools (Ray sets only OMP_NUM_THREADS).
WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Engine:
    """Where map work runs (the mix spec's `engine` section, without pydantic)."""

    kind: str = "local"  # local | ray
    address: Optional[str] = None  # ray: None = start a local Ray instance; else a cluster address
    num_cpus: int = 2  # local: threads; ray with address None: CPUs of the local instance
    chunk_rows: int = 2048  # rows per map chunk (bounds a task's memory; never from num_cpus)
    max_retries: int = 3  # ray: re-runs of a task lost to a worker/node failure
    object_store_mb: int = 256  # ray with address None: object store size of the local instance
    connect_timeout_s: float = 30.0  # ray with an address: how long the address may take to answer

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"engine.kind {self.kind!r}: expected one of {KINDS}")

    @classmethod
    def from_spec(cls, section) -> "Engine":
        """From the mix spec's `engine` section (any object with these attributes)."""
        return cls(**{k: getattr(section, k) for k in cls.__dataclass_fields__})

    @property
    def window(self) -> int:
        """Most chunks in flight at once (bounds memory held by finished, not yet consumed results)."""
        return max(2, 2 * self.num_cpus)


def map_chunks(fn: Callable[[C], R], chunks: Iterable[C], engine: Engine) -> Iterator[R]:
    """`fn(chunk)` for every chunk, yielded in chunk order (see the module docstring)."""
    if engine.kind == "ray":
        return _ray_map(fn, chunks, engine)
    if engine.num_cpus <= 1:
        return (fn(c) for c in chunks)
    return _thread_map(fn, chunks, engine)


def _ordered_window(submit, get, chunks: Iterable, window: int) -> Iterator:
    pending = []
    for c in chunks:
        pending.append(submit(c))
        if len(pending) >= window:
            yield get(pending.pop(0))
    while pending:
        yield get(pending.pop(0))


def _thread_map(fn, chunks, engine: Engine) -> Iterator:
    with ThreadPoolExecutor(max_workers=engine.num_cpus) as pool:
        yield from _ordered_window(lambda c: pool.submit(fn, c), lambda f: f.result(), chunks, engine.window)


def _ray_map(fn, chunks, engine: Engine) -> Iterator:
    ray = import_ray()

    if not ray.is_initialized():
        raise RuntimeError("engine.kind is 'ray' but Ray is not connected: run the step with the engine "
                           "resource (or inside core.engine.ray_session)")
    # `fn` may be a functools.partial (a map function with its fixed arguments): put once, applied per task
    task, fn_ref = ray.remote(num_cpus=1, max_retries=engine.max_retries)(_apply), ray.put(fn)
    yield from _ordered_window(lambda c: task.remote(fn_ref, c), ray.get, chunks, engine.window)


def _apply(fn, chunk):
    return fn(chunk)


def package_root() -> str:
    """The folder holding the `mix_assets` package (local Ray workers import it from there)."""
    return str(Path(__file__).resolve().parents[2])


def ray_init_options(engine: Engine) -> dict:
    """`ray.init` keyword arguments (address excluded) for this engine.

    A local instance gets `num_cpus`, a pinned object store, no dashboard, and PYTHONPATH naming
    this checkout (workers inherit nothing added to sys.path at runtime). A cluster's workers need
    the same code and versions in their image; only the tokenizer thread caps are sent.
    """
    env = dict(WORKER_ENV)
    opts: dict = {}
    if engine.address is None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root(), os.environ.get("PYTHONPATH", "")) if p)
        opts.update(num_cpus=engine.num_cpus, object_store_memory=engine.object_store_mb << 20,
                    include_dashboard=False, log_to_driver=False)
    opts["runtime_env"] = {"env_vars": env}
    return opts


# The pip extra that installs ray and dagster-ray (pyproject.toml's optional-dependencies).
RAY_EXTRA = "ray"
RAY_INSTALL = f"pip install -e '.[{RAY_EXTRA}]'"
# Ports a bare host means: Ray's GCS (`ray start --head`) and the Ray Client server.
GCS_PORT, CLIENT_PORT = 6379, 10001


class RayNotInstalled(ImportError):
    """engine.kind ray without ray (or dagster-ray) importable."""


def import_ray():
    """The `ray` module, or RayNotInstalled naming the extra that installs it."""
    try:
        import ray
    except ImportError as e:
        raise RayNotInstalled(ray_missing_message(e)) from e
    return ray


def ray_missing_message(e: ImportError) -> str:
    name = getattr(e, "name", None) or "ray"
    return (f"engine.kind is 'ray' but {name!r} cannot be imported ({e}); the [{RAY_EXTRA}] extra installs "
            f"ray and dagster-ray: {RAY_INSTALL} (or set engine.kind: local)")


def ray_endpoint(address: Optional[str]) -> Optional[tuple[str, int, str]]:
    """(host, port, what answers there) that `ray.init(address=...)` connects to first; None for a new
    local instance, "auto" without RAY_ADDRESS and other schemes (left to ray). ValueError when the
    address has no host or a port that is not a number."""
    if address == "auto":  # a running cluster named by RAY_ADDRESS (else ray's own lookup)
        address = os.environ.get("RAY_ADDRESS") or None
    if address is None or address == "local":
        return None
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    if scheme not in ("", "ray"):
        return None
    try:
        parts = urlsplit("//" + rest)
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number: ray would refuse it, say so here
        raise ValueError(f"engine.address {address!r}: expected host:port or ray://host:port") from None
    if not host:
        raise ValueError(f"engine.address {address!r}: no host (expected host:port or ray://host:port)")
    if scheme == "ray":
        return host, port or CLIENT_PORT, "the Ray Client server"
    return host, port or GCS_PORT, "the Ray GCS"


# Ray's GCS and its Ray Client server are gRPC servers: the first thing either sends on a new connection
# is an HTTP/2 SETTINGS frame (RFC 9113 §3.4). Sent first, so a server expecting the client preface answers.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


class NotRayError(ConnectionError):
    """Something other than Ray answers at `engine.address` (a ConnectionError, as when nothing does)."""


def _not_grpc(sock: socket.socket, deadline: float) -> Optional[str]:
    """None when the peer answers as a gRPC (HTTP/2) server before `deadline`; else what it did instead."""
    head = b""
    closed = False
    try:
        sock.sendall(_H2_PREFACE)
        while len(head) < 9:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            chunk = sock.recv(9 - len(head))
            if not chunk:
                closed = True
                break
            head += chunk
    except socket.timeout:
        pass
    except OSError:  # reset by the peer: it is not waiting for an HTTP/2 client
        closed = True
    if len(head) == 9 and head[3] == 0x04 and head[5:9] == b"\x00\x00\x00\x00":  # SETTINGS, stream 0
        return None
    if head and not closed:
        with contextlib.suppress(OSError):
            sock.settimeout(0.2)
            head += sock.recv(32)
    if head:
        return f"answered {head[:40]!r}"
    return "closed the connection without a word" if closed else "sent nothing"


# address -> (time.monotonic() of the failure, its error): Dagster initialises the engine resource again
# in the same process after a run fails at resource init, and each init would wait out the deadline again.
_UNREACHABLE: dict[str, tuple[float, Exception]] = {}


def check_reachable(engine: Engine, sleep: Callable[[float], None] = time.sleep) -> None:
    """`_check_reachable`, failing at once (same error) when this process found the address unreachable
    less than `connect_timeout_s` ago."""
    seen = _UNREACHABLE.get(engine.address or "")
    if seen is not None and time.monotonic() - seen[0] < engine.connect_timeout_s:
        ago = time.monotonic() - seen[0]
        raise type(seen[1])(f"{seen[1]} (found {ago:.0f} s ago in this process; not waiting again)")
    try:
        _check_reachable(engine, sleep)
    except (ConnectionError, NotRayError) as e:
        _UNREACHABLE[engine.address or ""] = (time.monotonic(), e)
        raise
    _UNREACHABLE.pop(engine.address or "", None)


def _check_reachable(engine: Engine, sleep: Callable[[float], None] = time.sleep) -> None:
    """Fail within `engine.connect_timeout_s` unless Ray answers at the address.

    `ray.init` on an address nobody listens at, or where something other than Ray listens (the
    dashboard's port, a web server), retries forever (logging "Failed to connect to GCS" every 30 s)
    and cannot be interrupted, so this runs first: a TCP connect, retried until the deadline (a
    cluster still starting), then the peer must answer as a gRPC server does (an HTTP/2 SETTINGS
    frame). With RAY_USE_TLS set the gRPC channel is TLS: only the TCP connect is checked.
    """
    target = ray_endpoint(engine.address)
    if target is None:
        return
    host, port, what = target
    deadline = time.monotonic() + engine.connect_timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(left, 5.0))) as sock:
                if os.environ.get("RAY_USE_TLS", "").strip().lower() in ("1", "true"):
                    return
                problem = _not_grpc(sock, deadline)
                if problem is None:
                    return
                raise NotRayError(
                    f"engine.address {engine.address!r}: {host}:{port} accepted a connection but is not Ray "
                    f"({what}, a gRPC server): it {problem} within engine.connect_timeout_s = "
                    f"{engine.connect_timeout_s:g} s, and ray.init would wait there for good; check the port "
                    "(the GCS port, 6379 unless the cluster set another, not the dashboard's 8265; "
                    "ray://host:10001 for the Ray Client server)")
        except NotRayError:
            raise
        except OSError as e:
            err = e
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sleep(min(0.5, left))
    raise ConnectionError(
        f"engine.address {engine.address!r}: nothing answered at {host}:{port} ({what}) within "
        f"engine.connect_timeout_s = {engine.connect_timeout_s:g} s (last error: {err.strerror or err}); "
        "check the address and that the cluster is up")


def ray_address(engine: Engine) -> str:
    """`ray.init` address: "local" always starts a new instance (never RAY_ADDRESS or a running one)."""
    return engine.address or "local"


@contextlib.contextmanager
def ray_session(engine: Engine):
    """Connect Ray for `engine` outside Dagster (bench, scripts); shut down on exit.

    Yields at once when Ray is already connected (a test's session-wide instance) and leaves it up.
    """
    if engine.kind != "ray":
        yield
        return
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    check_reachable(engine)
    ray.init(address=ray_address(engine), **ray_init_options(engine))
    try:
        yield
    finally:
        ray.shutdown()


# -- chunks of Parquet files ------------------------------------------------------------------------
@dataclass(frozen=True)
class RowRange:
    """Rows [start, stop) of one Parquet file.

    `path` names where ANY worker reads it: a local path (this machine), or an `s3://` URL read
    through core/transport by range GETs of the footer and the row groups needed (any node with the
    credentials). A file object also works, in process only (it does not travel to Ray workers)."""

    path: Any
    start: int
    stop: int
    endpoint_url: Optional[str] = None  # the S3-compatible endpoint of an s3:// path (None: AWS or env)


@dataclass(frozen=True)
class FileAt:
    """One file where any worker reads it: a local path or an `s3://` URL (range GETs through
    core/transport) with its endpoint. Small and picklable, unlike an open file; every reader opens
    its own (`open_parquet`)."""

    path: str
    endpoint_url: Optional[str] = None

    def __str__(self) -> str:  # messages name the file
        return self.path


@contextlib.contextmanager
def open_parquet(src):
    """A `pq.ParquetFile` over a `FileAt`, a local path, or an open file (in process only)."""
    if isinstance(src, FileAt):
        with _parquet(src.path, src.endpoint_url) as f:
            yield f
    else:
        with _parquet(src, None) as f:
            yield f


@contextlib.contextmanager
def _parquet(path, endpoint_url: Optional[str]):
    if isinstance(path, str) and transport.is_s3(path):
        with transport.open_url(path, endpoint_url) as f:
            yield pq.ParquetFile(f)
    else:
        yield pq.ParquetFile(path)


def row_ranges(path, chunk_rows: int, endpoint_url: Optional[str] = None) -> list[RowRange]:
    """The file (a path, an s3:// URL or a `FileAt`) cut into consecutive ranges of `chunk_rows` rows
    (the last may be shorter)."""
    if isinstance(path, FileAt):
        path, endpoint_url = path.path, path.endpoint_url
    with _parquet(path, endpoint_url) as f:
        n = f.metadata.num_rows
    return [RowRange(path, s, min(s + chunk_rows, n), endpoint_url) for s in range(0, n, chunk_rows)]


def read_rows(rng: RowRange, columns: Sequence[str]):
    """The rows of `rng` as one pyarrow Table (only the row groups overlapping it are read)."""
    with _parquet(rng.path, rng.endpoint_url) as f:
        md, groups, first, row = f.metadata, [], None, 0
        for g in range(md.num_row_groups):
            n = md.row_group(g).num_rows
            if row + n > rng.start and row < rng.stop:
                groups.append(g)
                first = row if first is None else first
            row += n
        if not groups:
            return f.schema_arrow.empty_table().select(list(columns))
        t = f.read_row_groups(groups, columns=list(columns))
    return t.slice(rng.start - first, rng.stop - rng.start)
