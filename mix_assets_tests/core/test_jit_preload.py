"""core/jit_preload.py: numba and the kernels loaded on a background thread, waited for by every user.

Each test runs in a fresh process (numba may be loaded already in the test process)."""

from __future__ import annotations

import subprocess
import sys


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_a_preload_loads_the_kernels_once_and_kernels_waits_for_it():
    got = _run("""
import sys
from mix_assets.core import jit_preload
t = jit_preload.start()
print(t is not None, jit_preload.start() is None)
k = jit_preload.kernels()
print(not t.is_alive(), k is sys.modules['mix_assets.core.kernels_jit'], len(k.split_hash_words.signatures) >= 1)
print(jit_preload.start() is None)
""")
    assert got == ["True", "True", "True", "True", "True", "True"]


def test_every_kernel_user_waits_for_a_running_preload():
    """The text keys (contamination_report, dedup_keys), the line keys and the signatures call kernels_jit only
    after the preload thread has finished: never two threads importing numba at once."""
    got = _run("""
import threading
import numpy as np, pyarrow as pa
from mix_assets.core import jit_preload, textkeys as tk
from mix_assets.stages.dedup import minhash as mh
joined = []

class Marker(threading.Thread):  # stands for a preload still running: records that a user waited for it
    def join(self, timeout=None):
        joined.append(1)

def after(f):
    joined.clear()
    jit_preload._THREADS[:] = [Marker()]
    f()
    return len(joined) > 0

print(after(lambda: tk.word_keys(pa.array(["a b c"], pa.large_string()))))
print(after(lambda: tk.word_hashes(tk.words(["a b"]))))
print(after(lambda: mh.signatures_from_hashes(np.zeros(3, np.uint32), np.array([0, 3], np.int64),
                                              np.ones(4, np.uint32), np.ones(4, np.uint32))))
""")
    assert got == ["True", "True", "True"]


def test_the_definitions_start_no_preload():
    """Loading the Definitions (the code server, a multiprocess step) starts no thread and loads no numba."""
    got = _run("""
import sys, threading
import mix_assets.definitions
from mix_assets.core import jit_preload
print(jit_preload._THREADS == [], 'numba' in sys.modules)
""")
    assert got == ["True", "False"]
