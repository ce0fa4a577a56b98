"""The local instance files: where `make demo` / the README put DAGSTER_HOME, Dagster finds its config.

`dagster dev` warns on every start when the current folder holds a dagster.yaml that is not
DAGSTER_HOME's, so the local config lives in dagster_home/ (DAGSTER_HOME itself), not the repo root.
"""

import re

from mix_assets.config import REPO_ROOT

HOME = REPO_ROOT / "dagster_home"


def test_no_instance_config_in_the_repository_root():
    assert not (REPO_ROOT / "dagster.yaml").exists() and not (REPO_ROOT / "dagster.yml").exists()


def test_makefile_and_readme_point_dagster_home_at_the_tracked_config():
    from dagster._core.instance.config import dagster_instance_config

    make = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^export DAGSTER_HOME := \$\(CURDIR\)/dagster_home$", make, re.M), make
    assert "export DAGSTER_HOME=$PWD/dagster_home" in (REPO_ROOT / "README.md").read_text()
    cfg, _ = dagster_instance_config(str(HOME))
    assert cfg["telemetry"] == {"enabled": False}
    assert cfg["run_retries"]["retry_on_asset_or_op_failure"] is False  # never retry a failed gate
