"""MixResource: the spec is parsed once per version of the config file; EngineResource fails fast."""

import os
import socket
import subprocess
import sys

import pytest

from mix_assets import config
from mix_assets.core import engine as eng
from mix_assets.resources import MixResource
from mix_assets_tests.conftest import minimal_config, source, write_config


def _config(tmp_path, **kw):
    return write_config(tmp_path, minimal_config(sources=[source("web", {"kind": "jsonl", "paths": ["w.jsonl"]})],
                                                 **kw))


def test_spec_is_parsed_once_and_again_after_an_edit(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    calls = []
    real = config.parse_spec
    monkeypatch.setattr(config, "parse_spec", lambda *a, **k: calls.append(1) or real(*a, **k))
    mix = MixResource(config_path=str(cfg))
    first = mix.spec
    assert all(mix.spec is first for _ in range(100)) and mix.storage.root == first.resolve(first.storage.root)
    assert len(calls) == 1
    _config(tmp_path, seed=4)  # an edited config is read by the next access, not served from the cache
    assert mix.spec.seed == 4 and len(calls) == 2


def test_storage_root_override_is_part_of_the_cache_key(tmp_path):
    cfg = _config(tmp_path)
    a = MixResource(config_path=str(cfg), storage_root=str(tmp_path / "a"))
    b = MixResource(config_path=str(cfg), storage_root=str(tmp_path / "b"))
    assert (a.storage.root, b.storage.root) == (str(tmp_path / "a"), str(tmp_path / "b"))


# -- engine kind ray: a wrong address and a missing ray fail fast, naming what to fix (issue 25) ---------
# Each runs in a child process with a timeout: before the fix, ray.init on a dead address blocked for good.
_STEP = """
import sys, time
{prelude}
import dagster as dg
from mix_assets.config import load_spec
from mix_assets.resources import EngineResource

spec = load_spec(sys.argv[1])

@dg.asset
def needs_engine(engine: EngineResource) -> None:
    pass

t0 = time.monotonic()
res = dg.materialize([needs_engine], resources={{"engine": EngineResource.from_spec(spec)}}, raise_on_error=False)
cause = next(e for e in res.all_events if e.is_failure).event_specific_data.error
while cause.cls_name.startswith("Dagster") and cause.cause is not None:  # the error under Dagster's wrapper
    cause = cause.cause
print(f"ELAPSED {{time.monotonic() - t0:.1f}}")
print("ERROR", cause.cls_name, cause.message)
"""


def _engine_step(tmp_path, engine: dict, prelude: str = "", timeout: float = 120) -> str:
    cfg = _config(tmp_path, engine=engine)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(config.REPO_ROOT), env.get("PYTHONPATH")) if p)
    script = tmp_path / "step.py"
    script.write_text(_STEP.format(prelude=prelude))
    try:
        out = subprocess.run([sys.executable, str(script), str(cfg)], capture_output=True, text=True,
                             timeout=timeout, env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the step with engine {engine} was still starting after {timeout:g} s") from None
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_a_ray_address_nobody_answers_at_fails_within_the_deadline_naming_it(tmp_path):
    pytest.importorskip("ray")
    address = f"127.0.0.1:{_closed_port()}"
    out = _engine_step(tmp_path, {"kind": "ray", "address": address, "connect_timeout_s": 2})
    elapsed = float(out.split("ELAPSED ", 1)[1].split()[0])
    error = out.split("ERROR ", 1)[1]
    assert error.startswith("ConnectionError") and address in error and "connect_timeout_s = 2 s" in error, out
    assert elapsed < 2 + 15, out  # the deadline, plus importing ray and dagster-ray on a loaded host


def test_engine_kind_ray_without_ray_names_the_extra_that_installs_it(tmp_path):
    out = _engine_step(tmp_path, {"kind": "ray"}, prelude="sys.modules['ray'] = None  # ray not importable")
    error = out.split("ERROR ", 1)[1]
    assert error.startswith("RayNotInstalled") and "[ray] extra" in error and "pip install -e '.[ray]'" in error, out


def test_ray_session_checks_the_address_before_ray_init(monkeypatch):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray instance is connected in this process: ray_session would use it")
    monkeypatch.setattr(ray, "init", lambda **kw: pytest.fail(f"ray.init called before the address answered: {kw}"))
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ConnectionError, match=address):
        with eng.ray_session(eng.Engine(kind="ray", address=address, connect_timeout_s=0.5)):
            pass


def test_the_resource_storage_root_is_checked_like_the_files_own(tmp_path):
    cfg = _config(tmp_path, publish={"url": str(tmp_path / "pub")})
    with pytest.raises(config.MixConfigError, match=r"is inside storage.root .*from the resource's storage_root"):
        MixResource(config_path=str(cfg), storage_root=str(tmp_path)).spec
