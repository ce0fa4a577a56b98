import copy

import pytest

from mix_assets import diff as diff_cli
from mix_assets.stages.publish.drift import compare_manifests, diff_text, documents_by_source, revision_diff


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


def test_revision_diff_counts_documents_tokens_and_files():
    before, after = _manifest(), _manifest()
    after["splits"]["train"]["sources"]["web"] = 1600
    after["files"][0] = {**after["files"][0], "sha256": "d" * 64}
    after["files"].append({"path": "train/train-00001.bin", "bytes": 10, "sha256": "e" * 64})
    docs_before = {"web": {"w1": "k1", "w2": "k2", "w3": "k3"}, "code": {"c1": "x"}}
    docs_after = {"web": {"w1": "k1", "w2": "K2", "w4": "k4", "w5": "k5"}, "code": {"c1": "x"}}
    d = revision_diff(before, after, docs_before, docs_after)
    web = next(r for r in d["sources"] if r["source"] == "web")
    assert web == {"source": "web", "documents_before": 3, "documents_after": 4, "documents_added": 2,
                   "documents_removed": 1, "documents_changed": 1, "train_tokens_before": 1500,
                   "train_tokens_after": 1600, "val_tokens_before": None, "val_tokens_after": None}
    assert d["files"] == {"added": ["train/train-00001.bin"], "removed": [], "changed": ["train/train-00000.bin"]}
    text = diff_text(d)
    assert "  web: documents 3 -> 4 (+2 -1 ~1); train tokens 1500 -> 1600" in text
    assert "  code: documents 1 -> 1 (+0 -0 ~0)" in text and "    added train/train-00001.bin" in text


def test_documents_by_source_keeps_what_dedup_kept():
    rows = [{"doc_id": "a", "source": "web", "exact_key": "1", "keep": True},
            {"doc_id": "b", "source": "web", "exact_key": "1", "keep": False}]
    assert documents_by_source(rows) == {"web": {"a": "1"}}


def test_diff_cli_names_an_unreadable_revision(tmp_path, capsys):
    assert diff_cli.main([str(tmp_path / "a"), str(tmp_path / "b")]) == diff_cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith(f"mix_assets.diff: {tmp_path / 'a'}: ") and "manifest.json: not found" in err, err


def test_documents_of_dedup_keys_equals_documents_by_source_of_its_rows():
    """The column-wise reading of review/dedup_keys.parquet gives what `documents_by_source` gives its rows
    (nulls included: a null keep drops the row, a null key reads "None")."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets.stages.publish.drift import documents_of_dedup_keys

    for cols in (("doc_id", "source", "exact_key", "keep"), ("doc_id", "source", "exact_key"), ("doc_id", "source")):
        t = pa.table({"doc_id": ["a", "b", "c", None, "e", "a"], "source": ["web", "web", None, "web", "books", "web"],
                      "exact_key": ["1", None, "3", "4", "5", "6"], "keep": [True, True, None, True, False, True]})
        t = t.select(list(cols))
        buf = io.BytesIO()
        pq.write_table(t, buf)
        want = documents_by_source(t.to_pylist())
        got = documents_of_dedup_keys(buf.getvalue())
        assert got == want and [list(v.items()) for v in got.values()] == [list(v.items()) for v in want.values()]
