import copy

import pytest

from mix_assets.stages.publish.drift import compare_manifests


def _manifest() -> dict:
    files = [{"path": "train/train-00000.bin", "bytes": 4096, "sha256": "a" * 64},
             {"path": "val/val-00000.bin", "bytes": 512, "sha256": "b" * 64},
             {"path": "tokenizer/tokenizer.json", "bytes": 900, "sha256": "c" * 64}]
    return {"format": "mix_assets.manifest/1", "config_sha256": "f" * 64, "seed": 0, "dtype": "uint16",
            "splits": {"train": {"samples": 4, "tokens": 2048, "shards": [{"path": "train/train-00000.bin"}],
                                 "sources": {"web": 1500, "code": 548}},
                       "val": {"samples": 1, "tokens": 256, "shards": []}},
            "sources": {"web": {"train_tokens": 1500}, "code": {"train_tokens": 548}},
            "totals": {"train_tokens": 2048, "val_tokens": 256},
            "files": files, "fingerprint": "9" * 64}


def test_identical_manifests_reproduce():
    c = compare_manifests(_manifest(), _manifest())
    assert c.reproduced and c.passed and c.drifts == ()
    assert "reproduced" in c.summary()


def test_drift_names_the_file_and_the_count():
    pub, new = _manifest(), _manifest()
    new["files"][0] = {**new["files"][0], "bytes": 4608, "sha256": "d" * 64}
    new["files"].append({"path": "train/train-00001.bin", "bytes": 10, "sha256": "e" * 64})
    new["splits"]["train"]["samples"] = 5
    new["sources"]["code"]["train_tokens"] = 1060
    new["fingerprint"] = "8" * 64
    c = compare_manifests(pub, new)
    assert c.comparable and not c.passed
    got = [(d.kind, d.what) for d in c.drifts]
    assert got == [("file_changed", "train/train-00000.bin"), ("file_added", "train/train-00001.bin"),
                   ("count_changed", "sources.code.train_tokens"), ("count_changed", "splits.train.samples")]
    assert c.drifts[0].describe() == (
        "train/train-00000.bin: content differs (published 4096 B sha256 aaaaaaaaaaaa, "
        "rebuilt 4608 B sha256 dddddddddddd)")
    assert c.drifts[3].as_row() == {"kind": "count_changed", "what": "splits.train.samples",
                                    "published": 4, "rebuilt": 5}
    assert "2 file(s) and 2 count(s) differ" in c.summary()


def test_config_change_is_not_drift_and_bad_manifest_is_named():
    pub, new = _manifest(), copy.deepcopy(_manifest())
    new["config_sha256"] = "0" * 64
    new["fingerprint"] = "1" * 64
    c = compare_manifests(pub, new)
    assert not c.comparable and c.passed and "config changed" in c.summary()
    del new["files"][1]["sha256"]
    with pytest.raises(ValueError, match=r"rebuilt manifest: files\[1\] needs 'path' and 'sha256'"):
        compare_manifests(pub, new)
