"""The manifest checker: a sound mix passes; every kind of damage fails naming the file and the number."""

from __future__ import annotations

import copy
import hashlib
import io
from pathlib import Path

import pytest

from mix_assets.lib.manifest import (
    FORMAT,
    LocalDir,
    ManifestError,
    check_manifest,
    compute_fingerprint,
    load_manifest,
    manifest_problems,
)
from mix_assets_tests.mixfactory import write_manifest, write_test_mix


@pytest.fixture()
def mix(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "mix"
    return root, write_test_mix(root, train_shards=(6, 6, 5), val_shards=(3, 2))


def one(problems: list[str], *needles: str) -> str:
    """The single problem mentioning every needle (fails loudly otherwise)."""
    hits = [p for p in problems if all(n in p for n in needles)]
    assert len(hits) == 1, f"expected one problem with {needles}, got {problems}"
    return hits[0]


def test_sound_mix_passes_through_every_kind_of_source(mix):
    root, m = mix
    assert m["format"] == FORMAT
    assert check_manifest(m, root) == []
    assert check_manifest(m, LocalDir(root)) == []
    assert check_manifest(m, lambda p: (root / p).open("rb")) == []
    assert check_manifest(m, None) == []  # structure only
    assert load_manifest(root) == m


def test_fingerprint_is_sha256_over_concatenated_file_hashes(mix):
    _, m = mix
    want = hashlib.sha256("".join(f["sha256"] for f in m["files"]).encode()).hexdigest()
    assert compute_fingerprint(m["files"]) == want == m["fingerprint"]
    assert compute_fingerprint([f["sha256"] for f in m["files"]]) == want


def test_flipped_byte_names_the_file_and_both_hashes(mix):
    root, m = mix
    shard = root / "train/train-00001.bin"
    data = bytearray(shard.read_bytes())
    data[17] ^= 0x01
    shard.write_bytes(bytes(data))
    bad_sha = hashlib.sha256(bytes(data)).hexdigest()
    problems = check_manifest(m, root, strict=False)
    msg = one(problems, "train/train-00001.bin", bad_sha)
    assert m["files"][1]["sha256"] in msg
    # Same finding through a non-seekable opener (how S3 / hub bodies look).
    assert check_manifest(m, lambda p: _Unseekable((root / p).read_bytes()), strict=False) == problems
    # Without hashing, sizes still match: the flip is invisible, as documented.
    assert check_manifest(m, root, verify_hashes=False, strict=False) == []
    with pytest.raises(ManifestError, match="train/train-00001.bin"):
        check_manifest(m, root)


def test_missing_shard_names_the_file_and_its_size(mix):
    root, m = mix
    (root / "val/val-00001.bin").unlink()
    msg = one(check_manifest(m, root, strict=False), "val/val-00001.bin")
    assert "not found" in msg and str(2 * 16 * 2) in msg


def test_truncated_shard_names_file_and_sizes(mix):
    root, m = mix
    p = root / "train/train-00002.bin"
    p.write_bytes(p.read_bytes()[:-2])
    msg = one(check_manifest(m, root, verify_hashes=False, strict=False), "train/train-00002.bin", "bytes")
    assert "158" in msg and "160" in msg  # 5 samples x 16 tokens x 2 bytes = 160


@pytest.mark.parametrize(
    "edit, needles",
    [
        (lambda m: m["totals"].__setitem__("train_samples", m["totals"]["train_samples"] + 1),
         ("totals.train_samples", "18", "17")),
        (lambda m: m["totals"].__setitem__("val_tokens", m["totals"]["val_tokens"] - 1), ("totals.val_tokens", "79", "80")),
        (lambda m: m["totals"].__setitem__("shards", 6), ("totals.shards", "6", "5")),
        (lambda m: m["totals"].__setitem__("dropped_tail_tokens", 11), ("totals.dropped_tail_tokens", "11", "10")),
        (lambda m: m["splits"]["train"].__setitem__("samples", 18), ("splits.train.samples", "18", "17")),
        (lambda m: m["splits"]["train"].__setitem__("emitted_tokens", m["splits"]["train"]["emitted_tokens"] + 1),
         ("splits.train.emitted_tokens", "280", "279")),
        (lambda m: m["splits"]["val"]["sources"].__setitem__("web", m["splits"]["val"]["sources"]["web"] + 1),
         ("splits.val.emitted_tokens", "the sum of splits.val.sources")),
        (lambda m: m["sources"]["books"].__setitem__("train_tokens", 1), ("sources.books.train_tokens", "says 1")),
        (lambda m: m["splits"]["val"].__setitem__("seam_rate", 1.5), ("splits.val.seam_rate", "1.5")),
        (lambda m: m.__setitem__("format", "other/1"), ("format", "other/1")),
        (lambda m: m.__setitem__("dtype", "int8"), ("dtype", "int8")),
        (lambda m: m["packing"].__setitem__("sample_len", 24), ("packing.sample_len", "24", "16")),
        (lambda m: m.__setitem__("fingerprint", "0" * 64), ("fingerprint", "0" * 64, "sha256 over the")),
    ],
)
def test_numbers_that_do_not_add_up_are_named(mix, edit, needles):
    root, m = mix
    m = copy.deepcopy(m)
    edit(m)
    problems = check_manifest(m, root, strict=False)
    assert any(all(n in p for n in needles) for p in problems), problems


def test_totals_off_by_one_raises_naming_field_and_numbers(mix):
    root, m = mix
    m["totals"]["train_tokens"] += 1
    write_manifest(root, m)
    with pytest.raises(ManifestError) as e:
        check_manifest(load_manifest(root), root)
    assert "totals.train_tokens: says 273, but splits.train.tokens is 272" in str(e.value)
    assert e.value.problems == ["totals.train_tokens: says 273, but splits.train.tokens is 272"]


def test_shard_bytes_must_equal_samples_times_sample_len_times_itemsize(mix):
    root, m = mix
    m["splits"]["train"]["shards"][0]["samples"] = 7
    m["splits"]["train"]["samples"] = 18
    problems = check_manifest(m, root, strict=False)
    one(problems, "train/train-00000.bin", "7 x 16 x 2 = 224", "192")


def test_empty_shard_is_refused(tmp_path):
    root = tmp_path / "mix"
    m = write_test_mix(root, train_shards=(4, 0, 3))
    one(check_manifest(m, root, strict=False), "train/train-00001.bin", "empty shard (0 samples)")


def test_shard_count_must_equal_file_listing(mix):
    root, m = mix
    m["files"] = [f for f in m["files"] if f["path"] != "val/val-00000.bin"]
    m["fingerprint"] = compute_fingerprint(m["files"])
    problems = check_manifest(m, root, strict=False)
    one(problems, "files: lists 4 shard files", "splits list 5 shards")
    one(problems, "val/val-00000.bin", "shard missing from files")
    one(problems, "val/val-00000.bin", "present in the mix directory but not listed")


def test_unlisted_extra_file_and_wrong_order_are_named(mix):
    root, m = mix
    (root / "train/train-00003.bin").write_bytes(b"\0" * 64)
    m["files"][0], m["files"][1] = m["files"][1], m["files"][0]
    m["fingerprint"] = compute_fingerprint(m["files"])
    problems = check_manifest(m, root, strict=False)
    one(problems, "train/train-00003.bin", "not listed in files")
    one(problems, "train/train-00000.bin", "expected at files[0]")


def test_tokenizer_and_review_files_must_be_listed(mix):
    _, m = mix
    m["tokenizer"]["files"]["tokenizer/tokenizer.json"] = "f" * 64
    m["review"]["dedup_keys"] = "review/missing.parquet"
    problems = manifest_problems(m, None)
    one(problems, "tokenizer/tokenizer.json", "f" * 64)
    one(problems, "review/missing.parquet", "review.dedup_keys")


def test_missing_fields_are_reported_not_crashed_on(mix):
    _, m = mix
    del m["splits"]["val"]
    del m["totals"]["shards"]
    m["splits"]["train"]["shards"][2].pop("sha256")
    problems = manifest_problems(m)
    one(problems, "splits.val: missing")
    one(problems, "totals.shards: missing")
    one(problems, "train/train-00002.bin.sha256: missing")


class _Unseekable(io.RawIOBase):
    def __init__(self, data: bytes):
        self._b = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        chunk = self._b.read(len(buf))
        buf[: len(chunk)] = chunk
        return len(chunk)
