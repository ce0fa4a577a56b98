"""The manifest checker: a sound mix passes; every kind of damage fails naming the file and the number."""

from __future__ import annotations

import copy
import hashlib
import io
import json
from pathlib import Path

import pytest

from mix_assets.format.checker import check_manifest, manifest_problems
from mix_assets.format.manifest import (
    FORMAT,
    INTERPRETATION_KEY,
    ManifestError,
    compute_fingerprint,
    interpretation_sha256,
)
from mix_assets.format.mixdir import LocalDir, load_manifest
from mix_assets.format.paths import UnsafePathError, safe_path
from mix_assets_tests.support.fakeremotes import FakeS3Client
from mix_assets_tests.support.mixfactory import write_manifest, write_test_mix


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


# -- paths taken from a manifest (issue 11) ---------------------------------------------------------------
@pytest.mark.parametrize("bad", ["../x", "a/../../x", "train/../../x", "/etc/passwd", "C:/x", "C:x", "a\\b",
                                 "..\\x", "", "./a", "a//b", "a/", ".", "a\x00b", "\\\\host\\share", 7, None])
def test_safe_path_refuses_every_escape(bad, tmp_path):
    with pytest.raises(UnsafePathError):
        safe_path(bad)
    with pytest.raises(UnsafePathError):
        safe_path(bad, tmp_path)


def test_safe_path_resolves_symlinks_inside_the_root_only(tmp_path):
    root = tmp_path / "mix"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_bytes(b"x")
    (tmp_path / "outside").write_bytes(b"x")
    (root / "in").symlink_to(root / "sub" / "f")
    (root / "out").symlink_to(tmp_path / "outside")
    assert safe_path("sub/f") == "sub/f"
    assert safe_path("in", root) == (root / "sub" / "f").resolve()
    with pytest.raises(UnsafePathError, match="outside"):
        safe_path("out", root)


def test_unsafe_paths_are_named_and_never_opened(mix):
    root, m = mix
    opened = []

    def opener(p):
        opened.append(p)
        return (root / p).open("rb")

    m["files"].append({"path": "../../outside.bin", "bytes": 3, "sha256": "a" * 64})
    m["files"].append({"path": "/etc/hostname", "bytes": 3, "sha256": "b" * 64})
    m["review"]["contamination_report"] = "review\\..\\..\\report.json"
    m["fingerprint"] = compute_fingerprint(m["files"])
    problems = check_manifest(m, opener, strict=False)
    one(problems, "files[", "'../../outside.bin'", "'..'")
    one(problems, "files[", "'/etc/hostname'", "absolute path")
    one(problems, "review.contamination_report", "backslash")
    assert not [p for p in opened if not (root / p).resolve().is_relative_to(root.resolve())]


def test_a_listed_file_that_is_a_symlink_out_of_the_root_is_refused(mix, tmp_path):
    """Before: the checker (and the reader) followed it and passed."""
    from mix_assets.reader import open_mix

    root, m = mix
    tok = root / "tokenizer/tokenizer.json"
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(tok.read_bytes())
    tok.unlink()
    tok.symlink_to(outside)
    one(check_manifest(m, root, strict=False), "tokenizer/tokenizer.json", "outside")
    with pytest.raises(ManifestError, match="tokenizer/tokenizer.json.*outside"):
        open_mix(root, cache_dir=tmp_path / "cache")


# -- counts derived from the review files and the interpretation hash (issue 11) ---------------------------
@pytest.fixture()
def sep_mix(tmp_path: Path) -> tuple[Path, dict]:
    root = tmp_path / "sepmix"
    return root, write_test_mix(root, train_shards=(6, 6, 4), val_shards=(4, 2), separator="<|endoftext|>")


def _rehash(m: dict) -> dict:
    """What someone editing the manifest would do to keep its own hashes consistent."""
    m[INTERPRETATION_KEY] = interpretation_sha256(m)
    return m


def _longer_tail(m: dict, extra: int) -> None:
    """Claim `extra` more emitted-but-dropped train tokens, every sum kept consistent."""
    tr = m["splits"]["train"]
    tr["dropped_tail_tokens"] += extra
    tr["emitted_tokens"] += extra
    tr["sources"]["web"] += extra
    m["sources"]["web"]["train_tokens"] += extra
    m["sources"]["web"]["budget_tokens"] += extra
    m["totals"]["dropped_tail_tokens"] += extra


def _as_uint32(m: dict) -> None:
    """The same bytes read as uint32 samples (half as many), every sum kept consistent."""
    m["dtype"] = "uint32"
    for name, s in m["splits"].items():
        for sh in s["shards"]:
            sh["samples"] //= 2
        half = s["samples"] // 2
        cut = s["tokens"] - half * m["packing"]["sample_len"]
        s["samples"], s["tokens"], s["dropped_tail_tokens"] = half, s["tokens"] - cut, s["dropped_tail_tokens"] + cut
        m["totals"][f"{name}_samples"], m["totals"][f"{name}_tokens"] = half, s["tokens"]
    m["totals"]["dropped_tail_tokens"] = sum(s["dropped_tail_tokens"] for s in m["splits"].values())


@pytest.mark.parametrize(
    "edit, needles",
    [
        (lambda m: m["splits"]["val"].__setitem__("documents", m["splits"]["val"]["documents"] + 1),
         ("splits.val.documents", "val documents", "review/dedup_keys.parquet")),
        (lambda m: m["splits"]["train"].__setitem__("documents", m["splits"]["train"]["documents"] - 1),
         ("splits.train.documents", "unique_documents")),
        (lambda m: m["sources"]["web"].__setitem__("unique_documents", m["sources"]["web"]["unique_documents"] + 1),
         ("splits.train.documents", "unique_documents")),
        (lambda m: m["sources"]["web"].__setitem__("unique_documents", 50),
         ("sources.web.unique_documents", "kept train documents")),
        (lambda m: m["sources"]["books"].__setitem__("budget_tokens", m["sources"]["books"]["budget_tokens"] + 5),
         ("sources.books.budget_tokens", "review/mix_config.json", "target_tokens x share x epochs")),
        (lambda m: m["sources"]["books"].__setitem__("epochs", 2.0), ("sources.books.epochs", "2.0", "1.0")),
        (lambda m: m.__setitem__("seed", 5), ("seed", "review/mix_config.json")),
        (lambda m: m["packing"].__setitem__("separator", None), ("packing.separator", "review/mix_config.json")),
        (lambda m: _longer_tail(m, 16), ("splits.train.dropped_tail_tokens", "shorter than one sample")),
        (_as_uint32, ("dtype", "vocab_size 97", "uint16")),
        (lambda m: m.__setitem__("config_sha256", "1" * 64), ("config_sha256", "review/mix_config.json")),
    ],
)
def test_counts_the_review_files_determine_cannot_be_edited(sep_mix, edit, needles):
    root, m = sep_mix
    assert check_manifest(m, root) == []
    m = copy.deepcopy(m)
    edit(m)
    problems = check_manifest(_rehash(m), root, strict=False)
    assert any(all(n in p for n in needles) for p in problems), problems


def _reinterpret_seq_len(m: dict, factor: int = 2) -> dict:
    """Same bytes read as samples `factor` times shorter: every sum fixed, the interpretation hash redone."""
    m = copy.deepcopy(m)
    m["packing"]["seq_len"] //= factor
    m["packing"]["sample_len"] //= factor
    for s in m["splits"].values():
        s["samples"] *= factor
        for sh in s["shards"]:
            sh["samples"] *= factor
    m["totals"]["train_samples"] *= factor
    m["totals"]["val_samples"] *= factor
    return _rehash(m)


def test_seq_len_reinterpretation_under_a_pinned_fingerprint_is_refused(mix, tmp_path):
    """Before: with the sums fixed, the checker and a pinned reader accepted the same files as 8-token samples."""
    from mix_assets.reader import open_mix

    root, m = mix
    edited = _reinterpret_seq_len(m)
    assert edited["fingerprint"] == m["fingerprint"]
    assert manifest_problems(edited, None) == []  # structurally sound; only the config says otherwise
    one(check_manifest(edited, root, strict=False), "packing.seq_len", "says 8", "packing.seq_len = 16")
    write_manifest(root, edited)
    with pytest.raises(ManifestError, match="packing.seq_len: says 8"):
        open_mix(root, cache_dir=tmp_path / "c", expected_fingerprint=m["fingerprint"])
    s3 = FakeS3Client("bucket", root.parent, prefix=root.name)  # a lazily fetching reader checks it at open too
    with pytest.raises(ManifestError, match="packing.seq_len: says 8"):
        open_mix(f"s3://bucket/{root.name}", cache_dir=tmp_path / "s3c", s3_client=s3,
                 expected_fingerprint=m["fingerprint"])


def test_interpretation_sha256_is_recomputed_and_covers_how_bytes_are_read(mix):
    root, m = mix
    assert m[INTERPRETATION_KEY] == interpretation_sha256(m)
    for edit in (lambda x: x["packing"].__setitem__("seq_len", 8), lambda x: x.__setitem__("dtype", "uint32"),
                 lambda x: x["tokenizer"].__setitem__("special_tokens", {"<s>": 1}),
                 lambda x: x["splits"]["train"]["shards"][0].__setitem__("samples", 5)):
        other = copy.deepcopy(m)
        edit(other)
        assert interpretation_sha256(other) != m[INTERPRETATION_KEY]
        one(manifest_problems(other, None), INTERPRETATION_KEY, "says")
    for unrelated in (lambda x: x["splits"]["val"].__setitem__("seam_rate", 0.5), lambda x: x.__setitem__("name", "n")):
        other = copy.deepcopy(m)
        unrelated(other)
        assert interpretation_sha256(other) == m[INTERPRETATION_KEY]
    del m[INTERPRETATION_KEY]
    one(manifest_problems(m, None), INTERPRETATION_KEY, "missing")


def test_reader_state_pins_the_interpretation(mix, tmp_path):
    from mix_assets.reader import ResumeMismatchError, open_mix

    root, m = mix
    r = open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=1)
    state = r.state_dict()
    assert state[INTERPRETATION_KEY] == m[INTERPRETATION_KEY]
    state[INTERPRETATION_KEY] = "0" * 64
    with pytest.raises(ResumeMismatchError, match=INTERPRETATION_KEY):
        open_mix(root, cache_dir=tmp_path / "c", shuffle_seed=1).load_state_dict(state)


def test_scrub_manifest_is_listed_exactly_when_the_config_scrubs_and_its_counts_are_checked():
    import pyarrow as pa

    from mix_assets.core import pii
    from mix_assets.format.checks.pii import pii_sources, scrub_problems

    cfg = {"filters": {"pii": {"enabled": True, "rules": ["email", "phone"]}, "c4": None},
           "sources": [{"name": "a"}, {"name": "b", "filters": {"pii": {"enabled": False}}}, {"name": "c"}]}
    assert pii_sources(cfg) == ["a", "c"]
    assert pii_sources({"filters": None, "sources": [{"name": "a", "filters": {"pii": {}}}, {"name": "b"}]}) == ["a"]
    rules = pii.rules_named(["email", "phone"])
    counts = pa.table({"email": pa.array([1, 0, 2], pa.int32()), "phone": pa.array([0, 0, 1], pa.int32())})
    sm = pii.scrub_manifest(counts, ["a", "a", "c"], rules)
    for v in sm["sources"].values():
        v["rules"] = ["email", "phone"]
    files = {"scrub_manifest.json": json.dumps(sm).encode()}
    src = lambda p: io.BytesIO(files[p])  # noqa: E731
    m = {"review": {"scrub_manifest": "scrub_manifest.json"}}
    assert scrub_problems(m, src, cfg) == []
    assert scrub_problems({"review": {}}, src, cfg) == \
        ["review.scrub_manifest: missing, but the config scrubs PII in ['a', 'c']"]
    assert "listed, but the config scrubs PII in no source" in scrub_problems(m, src, {"sources": [{"name": "a"}]})[0]

    def problems_with(edit) -> list[str]:
        bad = json.loads(json.dumps(sm))
        edit(bad)
        files["scrub_manifest.json"] = json.dumps(bad).encode()
        return scrub_problems(m, src, cfg)

    assert problems_with(lambda d: d["rules"][0].update(pattern=".*")) == [
        "scrub_manifest.json: rules[email].pattern_sha256 is not the sha256 of its pattern",
        f"scrub_manifest.json: rules_sha256 {sm['rules_sha256']} is not the sha256 over its rules "
        f"({pii.rules_sha256([pii.PiiRule('email', '<EMAIL>', '.*', ''), rules[1]])})"]
    assert problems_with(lambda d: d["sources"].pop("c")) == \
        ["scrub_manifest.json: sources ['a'], but the config scrubs PII in ['a', 'c']"]
    assert "counts are incoherent" in problems_with(lambda d: d["sources"]["a"].update(scrubbed_docs=3))[0]
    assert "do not match" in problems_with(lambda d: d["sources"]["a"]["redactions"].pop("phone"))[0]
    assert "not a scrub manifest" in problems_with(lambda d: d.pop("rules"))[0]


# -- splits.train.documents without a separator (issue 25 §2.5) ------------------------------------------
@pytest.mark.parametrize("delta", [-1, -6, +1])
def test_train_documents_without_a_separator_cannot_be_edited(mix, delta):
    """Before: without a separator (a document of no token is left out of the stream) the checker only asked
    train documents <= the sum of unique documents, so any lower count passed. A document encodes to no token
    only when it has no words, and the dedup keys count those: with none, the two counts are equal."""
    root, m = mix
    assert m["packing"]["separator"] is None and check_manifest(m, root) == []
    m = copy.deepcopy(m)
    m["splits"]["train"]["documents"] += delta
    problems = check_manifest(_rehash(m), root, strict=False)
    one(problems, "splits.train.documents", f"says {6 + delta}", "6")


def test_train_documents_without_a_separator_may_leave_out_wordless_documents(tmp_path):
    # two of web's kept train documents have no words: up to two unique ones may have encoded to no token
    root = tmp_path / "mix"
    m = write_test_mix(root, train_shards=(6, 6, 5), val_shards=(3, 2), wordless={"web": 2})
    assert check_manifest(m, root) == []
    for delta, ok in ((-1, True), (-2, True), (-3, False)):
        e = copy.deepcopy(m)
        e["splits"]["train"]["documents"] += delta
        problems = check_manifest(_rehash(e), root, strict=False)
        assert (problems == []) == ok, (delta, problems)
        if not ok:
            one(problems, "splits.train.documents", "says 3", "2 without words")


@pytest.mark.parametrize("packing", [{}, {"separator": "<|endoftext|>"}], ids=["contiguous", "separator"])
def test_built_documents_counts_are_pinned_by_the_review_files_and_bounded_by_the_index(tmp_path, packing):
    """A built mix (token_shards, document indexes, dedup keys with n_words): its counts pass; a lowered
    val or train count is refused by the full check, and, through the document indexes, by the reader's
    structural one too (before: the reader accepted any splits.val.documents)."""
    from mix_assets_tests.stages.tokens.test_tokens_pipeline import build

    _, _, _, man = build(tmp_path, packing=packing)
    mix = tmp_path / "mix"
    assert check_manifest(man, mix) == [] and check_manifest(man, mix, verify_hashes=False) == []
    for split in ("train", "val"):
        m = copy.deepcopy(man)
        m["splits"][split]["documents"] -= 1
        assert any(f"splits.{split}.documents" in p for p in check_manifest(_rehash(m), mix, strict=False))
        structural = check_manifest(m, None, strict=False)
        assert any(f"splits.{split}.documents" in p for p in structural), (split, structural)
    m = copy.deepcopy(man)  # with a separator, more than the index's starts and a token each of the tail
    tail = m["splits"]["val"]["dropped_tail_tokens"]
    m["splits"]["val"]["documents"] += tail + 1
    problems = check_manifest(_rehash(m), None, strict=False)
    flagged = any("splits.val.documents" in p and "dropped tail" in p for p in problems)
    assert flagged == bool(packing), problems
