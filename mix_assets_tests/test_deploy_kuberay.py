"""deploy/kuberay/raycluster.yaml: the RayCluster the map stages run on in production (engine.kind ray).

No Kubernetes here: the manifest is parsed and checked against what the Dagster side expects (Ray
version, token auth on every Ray container, the head service address the README gives). With
KUBERAY_CRD naming KubeRay's ray.io_rayclusters.yaml (ray-operator/config/crd/bases/ in the KubeRay
repository), it is also validated against the CRD's v1 schema, unknown fields rejected as the API
server would prune them.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "deploy" / "kuberay" / "raycluster.yaml"
SECRET, KEY = "mix-ray-auth", "RAY_AUTH_TOKEN"


def _cluster() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def _containers(rc: dict) -> list[dict]:
    groups = [rc["spec"]["headGroupSpec"], *rc["spec"]["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def _pinned_ray() -> str:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    return next(re.fullmatch(r"ray(\[\w+\])?==(.+)", d).group(2) for d in extra if d.startswith("ray"))


def test_raycluster_matches_the_pinned_ray_and_has_a_head_and_a_worker_group():
    rc = _cluster()
    assert (rc["apiVersion"], rc["kind"]) == ("ray.io/v1", "RayCluster")
    assert rc["spec"]["rayVersion"] == _pinned_ray()
    assert rc["spec"]["workerGroupSpecs"] and all(g["maxReplicas"] >= g["minReplicas"] >= 0
                                                  for g in rc["spec"]["workerGroupSpecs"])
    head = rc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert 10001 in {p["containerPort"] for p in head["ports"]}  # Ray Client, what the step pods use


def test_every_ray_container_uses_token_auth_from_the_secret_and_has_limits():
    for c in _containers(_cluster()):
        env = {e["name"]: e for e in c["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token", c["name"]
        assert env[KEY]["valueFrom"]["secretKeyRef"] == {"name": SECRET, "key": KEY}, c["name"]
        assert {"cpu", "memory"} <= c["resources"]["limits"].keys(), c["name"]


def test_readme_gives_the_head_service_address_and_secret_of_the_manifest():
    name = _cluster()["metadata"]["name"]
    readme = (REPO / "deploy" / "README.md").read_text()
    assert f"ray://{name}-head-svc.<namespace>.svc.cluster.local:10001" in readme
    assert f"generic {SECRET}" in readme and f"--from-literal={KEY}=" in readme


@pytest.mark.skipif(not os.environ.get("KUBERAY_CRD"), reason="KUBERAY_CRD (KubeRay's ray.io_rayclusters.yaml) not set")
def test_raycluster_validates_against_the_kuberay_crd():
    import jsonschema

    crd = yaml.safe_load(Path(os.environ["KUBERAY_CRD"]).read_text())
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    _no_unknown_fields(schema)
    errors = [f"{e.json_path}: {e.message[:200]}" for e in jsonschema.Draft7Validator(schema).iter_errors(_cluster())]
    assert not errors, errors
    bad = _cluster()
    bad["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resource"] = {}  # a typo is caught
    assert list(jsonschema.Draft7Validator(schema).iter_errors(bad))


def _no_unknown_fields(s) -> None:
    if isinstance(s, dict):
        if (s.get("type") == "object" and "properties" in s and "additionalProperties" not in s
                and not s.get("x-kubernetes-preserve-unknown-fields")):
            s["additionalProperties"] = False
        for v in s.values():
            _no_unknown_fields(v)
    elif isinstance(s, list):
        for v in s:
            _no_unknown_fields(v)
