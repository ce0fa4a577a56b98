"""numba and the compiled kernels (core/kernels_jit.py) loaded on a background thread, for a process that
will run a kernel later (the in-process executor: raw/<source> starts it, contamination_report and
dedup_keys use it): the load (~0.3 CPU s of imports and ~0.1 s for the first cached kernel) then overlaps
the reading of a source, whose threads spend much of their time in pyarrow and file reads, instead of
opening the first step that runs a kernel.

Every use of kernels_jit goes through `kernels()` (or `wait()` before importing a module that imports
numba), which waits for a preload still running: two threads importing numba at once could see its modules
half initialised. Nothing here imports numba at module level.
"""

from __future__ import annotations

import sys
import threading

_THREADS: list[threading.Thread] = []  # the preload started in this process (at most one)
_LOCK = threading.Lock()


def start() -> threading.Thread | None:
    """Start loading kernels_jit (and its first cached kernel) on a daemon thread; None when it is loaded
    already or a preload was started before in this process."""
    with _LOCK:
        if "mix_assets.core.kernels_jit" in sys.modules or _THREADS:
            return None
        t = threading.Thread(target=_load, name="kernels-preload", daemon=True)
        _THREADS.append(t)
        t.start()
    return t


def _load() -> None:
    try:
        from mix_assets.core import kernels_jit

        kernels_jit.warm()
    except Exception:  # noqa: BLE001 - the kernel's own import or call reports it
        pass


def wait() -> None:
    """Wait for a preload still running (see the module's docstring why)."""
    for t in list(_THREADS):
        t.join()


def kernels():
    """core.kernels_jit, once any preload has finished."""
    wait()
    from mix_assets.core import kernels_jit  # numba loads only in processes that run a kernel (core/kernels_jit.py)

    return kernels_jit
