"""Issue 29 §2: the demo built on a real two-node Ray cluster (two `ray start` processes, separate temp
dirs, 1 CPU each) whose only shared thing is an S3 storage root (SeaweedFS on loopback), with this test's
process joining as the driver; its revision has the fingerprint of the in-process (threads) build (the session
fixture `demo_fingerprint`, support/built_demo.py).

The task workers open nothing of the driver's: each refuses opening any file under the driver's folders
(the configs, the demo corpus, the driver's cache), so a task that
reached for a local path instead of storage fails the build (support/ray_cluster.watch_worker). The one
local folder they may use is the Ray build's `storage.cache_dir`, the scratch where S3 downloads land:
on a real cluster that path is each node's own disk; on one machine it is one folder, so this test does
not show that no task reads a copy another process downloaded there (each is a copy of an S3 object)."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import dagster as dg
import pytest

from mix_assets.config import REPO_ROOT, load_spec
from mix_assets.core import engine as eng
from mix_assets.core.transport import split_s3_url
from mix_assets.definitions import build_definitions
from mix_assets.core import layout
from mix_assets_tests.support import ray_cluster as rc
from mix_assets_tests.support.s3server import WRITER
from mix_assets_tests.support.ui_harness import config_variant

SELECTION = dg.AssetSelection.all() - dg.AssetSelection.assets("published_revision")
CHUNK_ROWS = 97  # many small map tasks, so both nodes get some


def _build(cfg: Path, root: str) -> None:
    defs = build_definitions(load_spec(cfg), storage_root=root)
    res = dg.materialize(list(defs.assets), resources=defs.resources, selection=SELECTION,
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert res.success, [e.message for e in res.all_events if e.is_failure]


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_demo_on_two_ray_nodes_sharing_only_s3_has_the_in_process_fingerprint(seaweedfs, monkeypatch, tmp_path,
                                                                              demo_fingerprint):
    ray = pytest.importorskip("ray")
    driver, scratch, nodes = tmp_path / "driver", tmp_path / "scratch", tmp_path / "nodes"
    ledger = nodes / "ledger"
    ledger.mkdir(parents=True)
    for var in ("RAY_ADDRESS", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    token = secrets.token_hex(16)  # Ray 2.60's token authentication, this cluster's own token
    creds = {"AWS_ACCESS_KEY_ID": WRITER[0], "AWS_SECRET_ACCESS_KEY": WRITER[1]}
    for k, v in creds.items():
        monkeypatch.setenv(k, v)

    base = {"storage": {"root": str(driver / "unused"), "s3_endpoint_url": seaweedfs.endpoint,
                        "cache_dir": str(driver / "cache")},
            "publish": {"url": str(driver / "published")}}
    # the demo's in-process (threads) build: the session's (support/built_demo.py; test_fingerprint_workers
    # compares with it too). Storage, engine and threads are operational: in no published byte.
    expected = demo_fingerprint

    # the nodes' environment: this checkout's code (their "image"), their own S3 credentials, the token
    node_env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "AWS_"))}
    node_env.update(creds, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
                    PYTHONPATH=os.pathsep.join(p for p in (eng.package_root(), os.environ.get("PYTHONPATH")) if p))
    with rc.two_node_cluster(nodes, node_env) as address, rc.driver_token(token):
        ray_cfg = config_variant(REPO_ROOT / "configs" / "demo.yaml", driver / "configs" / "ray.yaml", {
            **base, "storage": {**base["storage"], "cache_dir": str(scratch)},
            "engine": {"kind": "ray", "address": address, "num_cpus": 2, "chunk_rows": CHUNK_ROWS,
                       "connect_timeout_s": 30}})
        opts = eng.ray_init_options(eng.Engine(kind="ray", address=address))
        opts["runtime_env"]["worker_process_setup_hook"] = f"{rc.__name__}.watch_worker"
        opts["runtime_env"]["env_vars"].update({
            rc.FORBIDDEN_VAR: os.pathsep.join([str(driver), str(REPO_ROOT / "build")]),
            rc.LEDGER_VAR: str(ledger), rc.S3_PORT_VAR: str(int(seaweedfs.endpoint.rsplit(":", 1)[1]))})
        ray.init(address=address, log_to_driver=False, **opts)  # this process joins as the driver
        try:
            alive = rc.wait_for_nodes(ray, 2)
            assert sorted(n["Resources"].get("CPU", 0) for n in alive) == [1.0, 1.0]
            root = seaweedfs.url("two-nodes")
            _build(ray_cfg, root)  # the engine resource uses the connected driver
        finally:
            ray.shutdown()

    bucket, prefix = split_s3_url(root)
    body = seaweedfs.client("reader").get_object(Bucket=bucket, Key=f"{prefix}/{layout.MANIFEST}")["Body"].read()
    assert json.loads(body)["fingerprint"] == expected

    notes = {p.name: p.read_text().splitlines() for p in ledger.glob("*-*.txt")}
    refused = [line for lines in notes.values() for line in lines if line.startswith("refused")]
    assert refused == []
    reading = {name.split("-", 1)[0] for name, lines in notes.items() if any(x.startswith("s3 ") for x in lines)}
    assert reading == set(rc.NODES), notes  # tasks ran, and read the storage, on both nodes
