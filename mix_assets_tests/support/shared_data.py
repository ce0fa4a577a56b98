"""Real text for tests: the in-repo fixture (`mix_assets_tests/data`) and the larger shared data folder.

One rule finds the shared data folder, for the tests and the bench scripts: `MIX_SHARED_DATA` when set,
else the first ancestor of the repository that holds `shared/data` (`../shared/data` from a clone, one
level further up from a git worktree). A folder counts only if it has the shared data's README.md.
The default suite runs on the fixture; tests marked `shared_data` skip when the folder is absent
(or fail, with MIX_REQUIRE_SHARED_DATA=1, as CI sets).
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "mix_assets_tests" / "data"  # same layout as the shared data folder, a few hundred KB
FIXTURE_CONFIG = FIXTURE / "mix.yaml"
SHARED_SAMPLE = REPO / "configs" / "shared-sample.yaml"


def find_shared_data() -> Path | None:
    """The shared data folder by the rule above, or None when there is none."""
    env = os.environ.get("MIX_SHARED_DATA")
    cands = [Path(env)] if env else [p / "shared" / "data" for p in REPO.parents]
    return next((c for c in cands if (c / "README.md").is_file()), None)


def missing_reason() -> str:
    """Why a shared_data test skips: where the folder was looked for."""
    env = os.environ.get("MIX_SHARED_DATA")
    where = f"MIX_SHARED_DATA={env}" if env else f"no shared/data above {REPO}"
    return f"needs the shared data folder ({where}; set MIX_SHARED_DATA to its path)"


def required() -> bool:
    """MIX_REQUIRE_SHARED_DATA=1 (CI): a missing folder fails the shared_data tests instead of skipping them."""
    return os.environ.get("MIX_REQUIRE_SHARED_DATA") == "1"


def shared_data_dir() -> Path:
    """The shared data folder; skips the calling test when it is absent (fails when it is required)."""
    import pytest  # here, not at the top: the bench scripts import this module, some from other venvs

    found = find_shared_data()
    if found is None:
        if required():
            pytest.fail(missing_reason() + "; MIX_REQUIRE_SHARED_DATA=1 forbids skipping")
        pytest.skip(missing_reason())
    return found


@lru_cache(maxsize=None)
def paragraphs(source: str, root: Path = FIXTURE) -> list[str]:
    """Blank-line separated paragraphs (lines joined, >= 12 words) of every text file of a source."""
    out: list[str] = []
    for p in sorted((root / "sources" / source).glob("*.txt")):
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
            para = " ".join(line.strip() for line in block.split("\n") if line.strip())
            if len(para.split()) >= 12:
                out.append(para)
    return out


def long_text(n_chars: int) -> str:
    """The fixture's prose paragraphs, repeated until the text is at least n_chars long."""
    ps = paragraphs("gutenberg") + paragraphs("sherlock_holmes")
    reps = -(-n_chars // sum(len(p) + 1 for p in ps))
    return " ".join(ps * reps)


def real_mix_config(tmp_path: Path, data: Path) -> Path:
    """The mix over `data`: the fixture's mix.yaml, or configs/shared-sample.yaml for the shared data
    folder; written into tmp_path with every data (and blocklist) path absolute and storage under tmp_path."""
    import yaml  # here, not at the top (see shared_data_dir)

    shared = data != FIXTURE
    cfg = yaml.safe_load((SHARED_SAMPLE if shared else FIXTURE_CONFIG).read_text())

    def at(path: str) -> str:
        return str(data / (path.split("shared/data/", 1)[1] if shared else path))

    for s in cfg["sources"]:
        s["loader"]["paths"] = [at(p) for p in s["loader"]["paths"]]
    for t in cfg["audit"]["tasks"]:
        t["dataset"]["path"] = at(t["dataset"]["path"])
    config_dir = (SHARED_SAMPLE if shared else FIXTURE_CONFIG).parent
    for section in [cfg.get("filters") or {}, *((s.get("filters") or {}) for s in cfg["sources"])]:
        for lst in (section.get("url") or {}).get("lists", []):  # blocklists stay beside their config
            lst["path"] = str(config_dir / lst["path"])
    cfg["storage"] = {"root": str(tmp_path / "storage"), "cache_dir": str(tmp_path / "cache")}
    cfg["publish"]["url"] = str(tmp_path / "published")
    out = tmp_path / f"{cfg['name']}.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out
