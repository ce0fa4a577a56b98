"""The publish target a spec names: with write access, and as a stranger reads it (no Dagster here).

`spec` is a MixSpec (config.py); this module takes it as an argument and imports no config.
"""

from __future__ import annotations

import os

from mix_assets.core import transport
from mix_assets.stages.publish import publish as pub

PUBLISHED_REVISION = "published_revision"  # the asset that publishes to the target (stages/publish/assets.py)


def write_target(spec) -> pub.Target:
    """The publish target with write access (ambient AWS_* credentials / HF_TOKEN)."""
    p = spec.publish
    return pub.make_target(spec.resolve(p.url), s3_endpoint_url=p.s3_endpoint_url, s3_region=p.s3_region)


def read_only_target(spec, env: dict | None = None) -> pub.Target:
    """The same target as a stranger sees it: read-only credentials or anonymous."""
    env = os.environ if env is None else env
    p = spec.publish
    url = spec.resolve(p.url)
    prefix, kind = p.read_credentials_env, transport.scheme(url)
    if kind == transport.S3:
        key = env.get(f"{prefix}_ACCESS_KEY_ID") if prefix else None
        secret = env.get(f"{prefix}_SECRET_ACCESS_KEY") if prefix else None
        if prefix and not (key and secret):
            raise pub.PublishError(f"publish.read_credentials_env={prefix!r}: set {prefix}_ACCESS_KEY_ID and "
                                   f"{prefix}_SECRET_ACCESS_KEY (or unset it for anonymous reads)")
        client = transport.s3_client(p.s3_endpoint_url, p.s3_region, access_key=key, secret_key=secret,
                               anonymous=not key)
        return pub.S3Target(url, client)
    if kind == transport.HUB:
        from huggingface_hub import HfApi  # only for a hub target

        token = env.get(prefix) if prefix else None
        return pub.HubTarget(url, api=HfApi(token=token or False))
    return pub.LocalTarget(url)
