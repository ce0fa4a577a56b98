"""Child-process bodies for the reader tests that run several processes on one cache_dir (spawn-safe:
importable without pytest)."""

from __future__ import annotations

import hashlib
import traceback

import numpy as np


def s3_client(spec: tuple):
    """("fake", bucket, root, prefix): a FakeS3Client; ("s3", endpoint, key, secret): a boto3 client."""
    if spec[0] == "fake":
        from mix_assets_tests.fakeremotes import FakeS3Client

        return FakeS3Client(*spec[1:])
    from mix_assets.lib.publish import s3_client as make

    return make(spec[1], access_key=spec[2], secret_key=spec[3])


def read_batches(location: str, cache_dir: str, seed: int, cache_bytes: int, worker: int, batches: int | list[int],
                 batch_size: int, client_spec: tuple, barrier, out) -> None:
    """Read batches (`batches` random starts, or the given list of starts) once all workers are ready; put
    (worker, [(start, sha256 of the batch)], the client's GET counts, error text or None) on `out`."""
    from mix_assets.reader import open_mix

    got: list[tuple[int, str]] = []
    client = s3_client(client_spec)
    try:
        r = open_mix(location, cache_dir=cache_dir, shuffle_seed=seed, cache_bytes=cache_bytes, s3_client=client)
        rng = np.random.default_rng(worker)
        starts = batches if isinstance(batches, list) else [
            int(rng.integers(0, len(r) - batch_size + 1)) for _ in range(batches)]
        barrier.wait(timeout=60)
        for start in starts:
            got.append((start, hashlib.sha256(r.samples(start, batch_size).tobytes()).hexdigest()))
        r.close()
        out.put((worker, got, dict(getattr(client, "gets", {})), None))
    except Exception:
        out.put((worker, got, dict(getattr(client, "gets", {})), traceback.format_exc()))
