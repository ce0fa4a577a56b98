"""Scratch names that say which process owns them, so a later run can remove what a killed one left.

A scratch entry is named `<kind>_<host>_<pid>_<random>`. A run sweeps a folder for entries of its
kind left by a process of this host that is no longer alive; an entry of a live process (a
concurrent build) or of another host (a shared volume) is never touched. A reused pid only delays
a removal to a later run.
"""

from __future__ import annotations

import os
import re
import shutil
import socket

HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname()) or "host"


def owner_prefix(kind: str) -> str:
    """Name prefix for a scratch file or folder of `kind` owned by this process."""
    return f"{kind}_{HOST}_{os.getpid()}_"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def is_stale(name: str, kind: str) -> bool:
    """True for a scratch entry of `kind` whose owner (a process of this host) has exited."""
    m = re.fullmatch(rf"{re.escape(kind)}_([A-Za-z0-9-]+)_(\d+)_.+", name)
    return bool(m) and m[1] == HOST and not _alive(int(m[2]))


def sweep(folder: str | os.PathLike | None, kind: str) -> list[str]:
    """Remove the stale `kind` entries directly in `folder`; the names removed, sorted."""
    if not folder or not os.path.isdir(folder):
        return []
    gone = []
    for name in sorted(os.listdir(folder)):
        if not is_stale(name, kind):
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        gone.append(name)
    return gone
