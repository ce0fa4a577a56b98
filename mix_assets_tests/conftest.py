"""Shared fixtures: the SeaweedFS S3 server (session) and a synthetic mix directory."""

from mix_assets_tests.fake_hub import fake_hub  # noqa: F401
from mix_assets_tests.s3server import seaweedfs  # noqa: F401
from mix_assets_tests.synthetic_mix import synthetic_mix  # noqa: F401
