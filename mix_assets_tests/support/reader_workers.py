"""Child-process bodies for the reader tests that run several processes on one cache_dir (spawn-safe:
importable without pytest)."""

from __future__ import annotations

import hashlib
import traceback

import numpy as np


def remote(spec: tuple) -> dict:
    """open_mix keyword arguments: ("fake", bucket, root, prefix): a FakeS3Client; ("s3", endpoint, key,
    secret): a boto3 client; ("hub", endpoint): a hub endpoint."""
    if spec[0] == "fake":
        from mix_assets_tests.support.fakeremotes import FakeS3Client

        return {"s3_client": FakeS3Client(*spec[1:])}
    if spec[0] == "hub":
        return {"hub_endpoint": spec[1]}
    from mix_assets.core.transport import s3_client

    return {"s3_client": s3_client(spec[1], access_key=spec[2], secret_key=spec[3])}


def read_batches(location: str, cache_dir: str, seed: int, cache_bytes: int, worker: int, batches: int | list[int],
                 batch_size: int, client_spec: tuple, barrier, out) -> None:
    """Read batches (`batches` random starts, or the given list of starts) once all workers are ready; put
    (worker, [(start, sha256 of the batch)], the client's GET counts, error text or None) on `out`."""
    from mix_assets.reader import open_mix

    got: list[tuple[int, str]] = []
    kw = remote(client_spec)
    client = kw.get("s3_client")
    try:
        r = open_mix(location, cache_dir=cache_dir, shuffle_seed=seed, cache_bytes=cache_bytes, **kw)
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
