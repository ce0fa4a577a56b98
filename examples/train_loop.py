"""A tiny training loop with checkpoint/resume on top of mix_assets.reader.

The "model" is a count-based bigram model (hashed into a fixed table so any vocabulary fits): each step
it scores the batch (mean negative log-likelihood, add-alpha smoothing) and then adds the batch's
bigrams to its counts. It is deterministic, so an interrupted-and-resumed run must print exactly the
per-step losses of an uninterrupted one; that is what the reader's resume state guarantees.

    python examples/train_loop.py build/published/mix --steps 200 --batch-size 8 \
        --ckpt /tmp/ckpt.npz --ckpt-every 25 --stop-after 60     # "crash" after step 60
    python examples/train_loop.py build/published/mix --steps 200 --batch-size 8 \
        --ckpt /tmp/ckpt.npz --ckpt-every 25                     # resumes from the step-50 checkpoint

Each step prints `step <n> loss <float> samples_consumed <n>`; --losses FILE also appends them as JSON lines.
A checkpoint holds the model counts and `reader.state_dict()`, written atomically (temp file + rename).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from mix_assets.reader import open_mix


class BigramModel:
    """Counts of (previous token, token) pairs in a hashed table; P(b|a) = (C[a,b] + alpha) / (U[a] + alpha V)."""

    def __init__(self, vocab_size: int, table_bits: int = 20, alpha: float = 0.5):
        self.vocab_size = vocab_size
        self.table = 1 << table_bits
        self.alpha = alpha
        self.pair = np.zeros(self.table, dtype=np.float64)
        self.prev = np.zeros(vocab_size, dtype=np.float64)

    def _keys(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = x[:, :-1].astype(np.int64).ravel()
        b = x[:, 1:].astype(np.int64).ravel()
        return a, (a * self.vocab_size + b) % self.table

    def step(self, x: np.ndarray) -> float:
        """Loss of the batch under the current counts, then learn from it."""
        a, h = self._keys(x)
        p = (self.pair[h] + self.alpha) / (self.prev[a] + self.alpha * self.vocab_size)
        loss = float(-np.log(p).mean())
        np.add.at(self.pair, h, 1.0)
        np.add.at(self.prev, a, 1.0)
        return loss

    def state(self) -> dict:
        return {"pair": self.pair, "prev": self.prev}

    def load(self, state) -> None:
        self.pair = np.array(state["pair"], dtype=np.float64)
        self.prev = np.array(state["prev"], dtype=np.float64)


def save_checkpoint(path: Path, model: BigramModel, reader_state: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp.npz")
    np.savez(tmp, reader_state=np.array(json.dumps(reader_state)), **model.state())
    os.replace(tmp, path)


def train(location: str, *, steps: int, batch_size: int, ckpt: Path | None = None, ckpt_every: int = 10,
          stop_after: int | None = None, cache_dir: str | None = None, shuffle_seed: int = 1234,
          losses_file: Path | None = None, quiet: bool = False) -> dict[int, float]:
    """Train up to `steps` steps (resuming from `ckpt` when it exists); return {step: loss} of this invocation."""
    reader = open_mix(location, cache_dir=cache_dir, shuffle_seed=shuffle_seed)
    vocab = int(reader.manifest["tokenizer"]["vocab_size"])
    model = BigramModel(vocab)
    if ckpt is not None and ckpt.exists():
        with np.load(ckpt) as z:
            reader.load_state_dict(json.loads(str(z["reader_state"])))
            model.load(z)
        if not quiet:
            print(f"resumed at step {reader.step}, samples_consumed {reader.samples_consumed}", flush=True)
    losses: dict[int, float] = {}
    ran = 0
    while reader.step < steps:
        step = reader.step
        x = reader.batch(step, batch_size)
        loss = model.step(x)
        losses[step] = loss
        if not quiet:
            print(f"step {step} loss {loss!r} samples_consumed {reader.samples_consumed}", flush=True)
        if losses_file is not None:
            with open(losses_file, "a") as f:
                f.write(json.dumps({"step": step, "loss": loss}) + "\n")
        ran += 1
        if ckpt is not None and reader.step % ckpt_every == 0:
            save_checkpoint(ckpt, model, reader.state_dict())
        if stop_after is not None and ran >= stop_after:
            break  # simulated crash: anything after the last checkpoint is lost
    return losses


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("location", help="mix directory, s3://bucket/prefix or hf://datasets/org/name@revision")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--ckpt", type=Path, default=None, help="checkpoint file (.npz); resumed from when present")
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--stop-after", type=int, default=None, help="stop after this many steps (simulated crash)")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--shuffle-seed", type=int, default=1234)
    ap.add_argument("--losses", type=Path, default=None, help="append {step, loss} JSON lines here")
    a = ap.parse_args(argv)
    train(a.location, steps=a.steps, batch_size=a.batch_size, ckpt=a.ckpt, ckpt_every=a.ckpt_every,
          stop_after=a.stop_after, cache_dir=a.cache_dir, shuffle_seed=a.shuffle_seed, losses_file=a.losses)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
