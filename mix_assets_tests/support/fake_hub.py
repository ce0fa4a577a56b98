"""An in-memory Hugging Face hub behind huggingface_hub's own HTTP client (offline tests).

`FakeHub.install()` registers an httpx2 `MockTransport` as huggingface_hub's client factory, so the real
library code (`HfApi.create_repo/create_commit/create_tag/list_repo_refs/hf_hub_download`, preupload,
the LFS batch API and basic LFS PUTs) runs unchanged and only the network is replaced. It implements the
endpoints those calls use, with the hub's semantics: commits are atomic, `parent_commit` must be the
branch head, missing files/revisions answer 404 with the hub's `X-Error-Code`. Xet uploads are switched
off (a Xet CAS server is not faked); downloads carry no Xet headers so they use plain HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

import httpx2
import pytest

ENDPOINT = "https://hub.invalid"


@dataclass
class _Repo:
    commits: dict = field(default_factory=dict)  # sha -> {"tree": {path: bytes}, "parent": sha|None, "title": str}
    branches: dict = field(default_factory=dict)
    tags: dict = field(default_factory=dict)


class FakeHub:
    def __init__(self):
        self.repos: dict[str, _Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str]] = []
        self.fail_commit = False  # simulate a publish killed after the LFS uploads, before the commit

    # -- plumbing ------------------------------------------------------------------------------
    def install(self, monkeypatch) -> None:
        """Route huggingface_hub's HTTP client to this fake until `uninstall()`."""
        import huggingface_hub.constants as c
        from huggingface_hub.utils import _http

        monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(c, "ENDPOINT", ENDPOINT)
        monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
        self._previous_factory = _http._GLOBAL_CLIENT_FACTORY
        _http.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(self.handle),
                                                       follow_redirects=True))

    def uninstall(self) -> None:
        from huggingface_hub.utils import _http

        _http.set_client_factory(self._previous_factory)

    def api(self, token="hf_fake_write"):
        from huggingface_hub import HfApi

        return HfApi(endpoint=ENDPOINT, token=token)

    def _sha(self, repo: _Repo, tree: dict, parent) -> str:
        h = hashlib.sha1(json.dumps([parent, sorted((p, hashlib.sha256(b).hexdigest()) for p, b in tree.items())])
                         .encode() + str(len(repo.commits)).encode())
        return h.hexdigest()

    def _resolve(self, repo: _Repo, rev: str):
        rev = unquote(rev)
        if rev in repo.commits:
            return rev
        return repo.branches.get(rev) or repo.tags.get(rev)

    @staticmethod
    def _err(status: int, code: str, msg: str) -> httpx2.Response:
        return httpx2.Response(status, headers={"X-Error-Code": code, "X-Error-Message": msg}, json={"error": msg})

    # -- request handler -----------------------------------------------------------------------
    def handle(self, request: httpx2.Request) -> httpx2.Response:
        path = unquote(urlparse(str(request.url)).path)
        self.requests.append((request.method, path))
        parts = path.strip("/").split("/")
        if path == "/api/repos/create":
            body = json.loads(request.content)
            rid = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
            if rid in self.repos:
                return httpx2.Response(409, headers={"X-Error-Message": "You already created this dataset repo"},
                                       json={"error": "You already created this dataset repo",
                                             "url": f"{ENDPOINT}/datasets/{rid}"})
            repo = self.repos[rid] = _Repo()
            tree = {".gitattributes": b"*.bin filter=lfs diff=lfs merge=lfs -text\n"}
            sha = self._sha(repo, tree, None)
            repo.commits[sha] = {"tree": tree, "parent": None, "title": "initial commit"}
            repo.branches["main"] = sha
            return httpx2.Response(200, json={"url": f"{ENDPOINT}/datasets/{rid}", "name": rid})
        if path == "/api/validate-yaml":  # the hub checks a README's YAML front matter before a commit
            import yaml

            content = json.loads(request.content)["content"]
            try:
                yaml.safe_load(content.split("---")[1])
            except (IndexError, yaml.YAMLError) as e:
                return httpx2.Response(400, json={"errors": [{"message": str(e)}], "warnings": []})
            return httpx2.Response(200, json={"errors": [], "warnings": []})
        if parts[:2] == ["api", "datasets"] and len(parts) >= 5:
            rid, op, rest = f"{parts[2]}/{parts[3]}", parts[4], parts[5:]
            repo = self.repos.get(rid)
            if repo is None:
                return self._err(404, "RepoNotFound", f"Repository Not Found for url: {path}")
            return self._api(request, rid, repo, op, rest)
        if parts[0] == "datasets" and parts[3:4] == ["resolve"]:
            rid = f"{parts[1]}/{parts[2]}"
            repo = self.repos.get(rid)
            if repo is None:
                return self._err(404, "RepoNotFound", "Repository Not Found")
            sha = self._resolve(repo, parts[4])
            if sha is None:
                return self._err(404, "RevisionNotFound", f"Invalid rev id: {parts[4]}")
            fpath = "/".join(parts[5:])
            data = repo.commits[sha]["tree"].get(fpath)
            if data is None:
                return self._err(404, "EntryNotFound", f"{fpath} does not exist on {parts[4]}")
            etag = hashlib.sha256(data).hexdigest()
            headers = {"X-Repo-Commit": sha, "ETag": f'"{etag}"', "Content-Length": str(len(data))}
            return httpx2.Response(200, headers=headers, content=b"" if request.method == "HEAD" else data)
        if path.endswith(".git/info/lfs/objects/batch"):
            body = json.loads(request.content)
            objs = []
            for o in body["objects"]:
                entry = {"oid": o["oid"], "size": o["size"]}
                if o["oid"] not in self.lfs:
                    entry["actions"] = {"upload": {"href": f"{ENDPOINT}/lfs-upload/{o['oid']}"}}
                objs.append(entry)
            return httpx2.Response(200, json={"transfer": "basic", "objects": objs})
        if parts[0] == "lfs-upload" and request.method == "PUT":
            data = request.read()
            if hashlib.sha256(data).hexdigest() != parts[1]:
                return httpx2.Response(400, json={"error": "sha256 mismatch"})
            self.lfs[parts[1]] = data
            return httpx2.Response(200)
        return httpx2.Response(404, json={"error": f"fake hub: no route for {request.method} {path}"})

    def _api(self, request, rid: str, repo: _Repo, op: str, rest: list[str]) -> httpx2.Response:
        if op == "refs":
            def ref(kind, name, sha):
                return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha}
            return httpx2.Response(200, json={
                "branches": [ref("heads", n, s) for n, s in repo.branches.items()],
                "tags": [ref("tags", n, s) for n, s in repo.tags.items()], "converts": []})
        if op == "revision":
            sha = self._resolve(repo, "/".join(rest))
            if sha is None:
                return self._err(404, "RevisionNotFound", "Invalid rev id")
            tree = repo.commits[sha]["tree"]
            return httpx2.Response(200, json={"id": rid, "sha": sha, "private": False, "tags": [],
                                              "siblings": [{"rfilename": p} for p in sorted(tree)]})
        if op == "tree":
            sha = self._resolve(repo, rest[0])
            if sha is None:
                return self._err(404, "RevisionNotFound", "Invalid rev id")
            tree = repo.commits[sha]["tree"]
            prefix = "/".join(rest[1:])
            return httpx2.Response(200, json=[
                {"type": "file", "path": p, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                for p, b in sorted(tree.items()) if p.startswith(prefix)])
        if op == "preupload":
            body = json.loads(request.content)
            return httpx2.Response(200, json={"files": [
                {"path": f["path"], "uploadMode": "lfs" if f["path"].endswith(".bin") or f["size"] > 1024
                 else "regular", "shouldIgnore": False, "oid": None} for f in body["files"]]})
        if op == "commit":
            return self._commit(request, rid, repo, "/".join(rest))
        if op == "tag":
            sha = self._resolve(repo, "/".join(rest))
            body = json.loads(request.content)
            if sha is None:
                return self._err(404, "RevisionNotFound", "Invalid rev id")
            if body["tag"] in repo.tags:
                return self._err(409, "TagExists", "Tag already exists")
            repo.tags[body["tag"]] = sha
            return httpx2.Response(200, json={})
        return httpx2.Response(404, json={"error": f"fake hub: no api route {op}"})

    def _commit(self, request, rid: str, repo: _Repo, branch: str) -> httpx2.Response:
        if self.fail_commit:
            return httpx2.Response(500, json={"error": "injected failure before the commit"})
        lines = [json.loads(x) for x in request.read().decode().splitlines() if x.strip()]
        header = next(x["value"] for x in lines if x["key"] == "header")
        head = repo.branches.get(branch)
        if header.get("parentCommit") and header["parentCommit"] != head:
            return self._err(412, "PreconditionFailed", "parent commit is not the branch head")
        tree = dict(repo.commits[head]["tree"]) if head else {}
        for x in lines:
            v = x["value"]
            if x["key"] == "file":
                tree[v["path"]] = base64.b64decode(v["content"])
            elif x["key"] == "lfsFile":
                if v["oid"] not in self.lfs:
                    return httpx2.Response(422, json={"error": f"LFS object {v['oid']} was never uploaded"})
                tree[v["path"]] = self.lfs[v["oid"]]
            elif x["key"] == "deletedFile":
                tree.pop(v["path"], None)
        sha = self._sha(repo, tree, head)
        repo.commits[sha] = {"tree": tree, "parent": head, "title": header.get("summary")}
        repo.branches[branch] = sha
        return httpx2.Response(200, json={"commitUrl": f"{ENDPOINT}/datasets/{rid}/commit/{sha}", "commitOid": sha,
                                          "pullRequestUrl": None})


@pytest.fixture
def fake_hub(monkeypatch):
    """A FakeHub wired into huggingface_hub for the duration of one test."""
    hub = FakeHub()
    hub.install(monkeypatch)
    try:
        yield hub
    finally:
        hub.uninstall()
