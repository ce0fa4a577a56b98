"""The trainer's reader loads neither Dagster, nor a stage, nor pyarrow: a training job imports it
beside torch, and format's checker keeps its pyarrow-only checks lazy for it (test_imports.LAZY_IMPORTS)."""

import json
import subprocess
import sys
from pathlib import Path

from mix_assets_tests.support.synthetic_mix import build_synthetic_mix

REPO = Path(__file__).resolve().parents[2]

_READ = """
import json, sys
from mix_assets.reader import open_mix
r = open_mix(sys.argv[1], cache_dir=sys.argv[2], shuffle_seed=0)
r.batch(0, 2); r.state_dict()
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] in ("dagster", "pyarrow", "ray") or m.startswith("mix_assets.stages"))))
"""


def test_the_reader_loads_no_pyarrow_nor_dagster_nor_a_stage(tmp_path):
    build_synthetic_mix(tmp_path / "mix")
    out = subprocess.run([sys.executable, "-c", _READ, str(tmp_path / "mix"), str(tmp_path / "cache")],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert json.loads(out.splitlines()[-1]) == []
