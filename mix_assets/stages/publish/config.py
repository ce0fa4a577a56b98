"""The publish stage's config section: where the published revision goes and how a stranger reads it."""

from __future__ import annotations

from typing import Optional

from mix_assets.core.spec import Strict


class PublishSpec(Strict):
    """Where the published revision goes: a local directory, s3://bucket/prefix or hf://datasets/org/name."""

    url: str = "../build/published"  # local path (relative to the config file's directory) or URL
    s3_endpoint_url: Optional[str] = None  # for S3-compatible servers (SeaweedFS, MinIO)
    s3_region: Optional[str] = None
    # The verifier reads as a stranger. S3: env prefix of a read-only key pair (<P>_ACCESS_KEY_ID,
    # <P>_SECRET_ACCESS_KEY); hub: name of an env var holding a read token. None = anonymous access.
    # (Writes use the ordinary credential chain: AWS_* variables / HF_TOKEN.)
    read_credentials_env: Optional[str] = None
