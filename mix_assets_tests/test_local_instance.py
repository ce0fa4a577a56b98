"""The local instance files: the design card's top-level `dagster.yaml` is the instance `make demo`,
`make ui` and the README use (DAGSTER_HOME is the repository root, so `dagster dev` started there reads
it without warning), and it keeps run history in a git-ignored folder it names.
"""

import re
import shutil
import subprocess
import sys

from mix_assets.config import REPO_ROOT


def test_makefile_and_readme_point_dagster_home_at_the_top_level_config():
    from dagster._core.instance.config import dagster_instance_config

    make = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^export DAGSTER_HOME := \$\(CURDIR\)$", make, re.M), make
    assert "export DAGSTER_HOME=$PWD " in (REPO_ROOT / "README.md").read_text()
    assert not (REPO_ROOT / "dagster_home" / "dagster.yaml").exists()
    cfg, _ = dagster_instance_config(str(REPO_ROOT))
    assert cfg["telemetry"] == {"enabled": False}
    assert cfg["run_retries"]["retry_on_asset_or_op_failure"] is False  # never retry a failed gate
    assert cfg["storage"]["sqlite"]["base_dir"] == ".dagster"


def test_run_history_lands_in_the_ignored_folder_the_config_names(tmp_path):
    # A copy of the config in an empty folder started as the Makefile starts Dagster (cwd = DAGSTER_HOME):
    # every file the instance writes is under .dagster/, which .gitignore names.
    shutil.copy(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    code = ("import dagster as dg\n"
            "@dg.asset\ndef a():\n    return 1\n"
            "with dg.DagsterInstance.get() as inst:\n"
            "    assert dg.materialize([a], instance=inst).success\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"DAGSTER_HOME": str(tmp_path),
                       "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert "dagster.yaml" in written and any(p.startswith(".dagster/history/") for p in written), written
    assert all(p == "dagster.yaml" or p.startswith(".dagster/") for p in written), written
    assert ".dagster/" in (REPO_ROOT / ".gitignore").read_text().splitlines()
