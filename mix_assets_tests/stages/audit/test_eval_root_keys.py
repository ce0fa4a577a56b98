"""eval_registry's input keys (stages/audit/evals.root_keys): a fingerprint of the eval files it reads, which
never opens a test split, not even to hash it (a symlink to one included), and moves when an audited file does."""

from __future__ import annotations

import os

import pytest

from mix_assets.core import keys
from mix_assets.stages.audit import evals
from mix_assets.stages.audit.config import EvalTask
from mix_assets_tests.support.audit_fixtures import EVAL_ROWS, write_card_repo


def _task(dataset: dict) -> EvalTask:
    return EvalTask.model_validate({"name": "qa", "dataset": dataset, "scored_split": "validation",
                                    "audit_splits": ["validation"], "fields": ["question"]})


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = keys.sha256_file

    def recording(path):
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(keys, "sha256_file", recording)
    return seen


def test_a_local_folder_hashes_its_audit_splits_only(tmp_path, hashed):
    folder = tmp_path / "evals" / "qa"
    folder.mkdir(parents=True)
    (folder / "validation.jsonl").write_text('{"question": "what is a word"}\n')
    (folder / "test.jsonl").write_text('{"question": "never read"}\n')
    task = _task({"kind": "local", "path": "evals/qa"})
    before = evals.root_keys([task], tmp_path)
    assert set(before) == {"evals/qa"} and not [p for p in hashed if "test" in os.path.basename(p)]
    (folder / "test.jsonl").write_text('{"question": "edited, still never read"}\n')
    assert evals.root_keys([task], tmp_path) == before
    (folder / "validation.jsonl").write_text('{"question": "what is another word"}\n')
    assert evals.root_keys([task], tmp_path) != before
    (folder / "validation.jsonl").unlink()
    (folder / "validation.jsonl").symlink_to(folder / "test.jsonl")  # the registry refuses it: so does the key
    n = len(hashed)
    with pytest.raises(evals.TestSplitRefused):
        evals.root_keys([task], tmp_path)
    assert len(hashed) == n  # refused before anything was opened


def test_a_hub_repo_in_a_local_folder_hashes_all_but_its_test_files(tmp_path, hashed):
    write_card_repo(tmp_path / "repo", "  - name: question\n    dtype: string\n", EVAL_ROWS[:2])
    task = _task({"kind": "hub", "repo_id": "repo", "revision": "a" * 40})
    got = evals.root_keys([task], tmp_path)
    assert set(got) == {"evals/qa"}
    assert {os.path.relpath(p, tmp_path / "repo") for p in hashed} == {"README.md", "data/validation.parquet"}
