"""A map stage killed mid-way, for the resume tests (core/chunks.py): run it in a subprocess whose chunk
function marks every finished chunk in a file and then sleeps, SIGKILL the subprocess once `after` chunks
are marked, and count the chunk calls of the rerun in this process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the subprocess imports this package

# Prefix of the subprocess's program: `slowed(module, "fn", marks)` replaces module.fn by a wrapper that
# appends a line to `marks` after each chunk and sleeps, so the kill lands between chunks.
SLOWED = '''
import time
def slowed(module, name, marks, pause=0.4):
    fn = getattr(module, name)
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        with open(marks, "a") as f:
            f.write("done\\n")
        time.sleep(pause)
        return out
    setattr(module, name, wrapped)
'''


def marked(marks: Path) -> int:
    return len(marks.read_text().splitlines()) if marks.exists() else 0


def run_killed(program: str, marks: Path, after: int, timeout: float = 180.0) -> int:
    """Run `SLOWED + program` with python; SIGKILL it once `marks` holds `after` chunks; the chunks marked.
    Fails when the program ends (or errs) before it is killed."""
    proc = subprocess.Popen([sys.executable, "-c", SLOWED + program], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while marked(marks) < after:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {after} chunks: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{after} chunks not done within {timeout} s")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return marked(marks)


class Counter:
    """Wraps a chunk function, counting its calls (the rerun's computed chunks)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


class Lines:
    """A log that keeps its info lines."""

    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)
