"""The published-revision audit on small token mixes written here: documents with planted eval items,
encoded with a tokenizer trained on them, packed contiguously at several sample lengths.

The reference for every count is the in-graph scan (`Registry.scan_texts`) of the same documents:
decoding the shards back, whatever the sample boundaries, must find exactly the same windows.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mix_assets.config import REPO_ROOT
from mix_assets.stages.audit import contamination as ct
from mix_assets.stages.audit import published as P
from mix_assets.format.checker import check_manifest
from mix_assets.format.manifest import (
    FORMAT,
    INTERPRETATION_KEY,
    compute_fingerprint,
    file_entry,
    interpretation_sha256,
)
from mix_assets_tests.support.review_files import REVIEW_PATHS, write_review_files
from mix_assets.stages.tokens.tokenizer import train_bpe
from mix_assets_tests.support.audit_fixtures import CANARY, EVAL_ROWS, filler, make_spec

SEP = "<|endoftext|>"
ITEM0 = f"{EVAL_ROWS[0]['question']} {EVAL_ROWS[0]['choices'][0]}"  # 19 words
ITEM2 = f"{EVAL_ROWS[2]['question']} {EVAL_ROWS[2]['choices'][0]}"  # holds the canary


def _docs(seed: int = 0, n: int = 40, planted: dict[int, str] | None = None) -> list[str]:
    rng = random.Random(seed)
    docs = [filler(rng, rng.randint(20, 90)) + " " for _ in range(n)]
    for i, item in (planted or {}).items():
        docs[i] = filler(rng, 30) + " " + item + " " + filler(rng, 25) + " "
    return docs


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tok")
    rng = random.Random(5)
    texts = [filler(rng, 80) for _ in range(200)] + [f"{r['question']} {' '.join(r['choices'])}" for r in EVAL_ROWS]
    train_bpe(texts, 400, [SEP], str(d))
    return d


def write_token_mix(root: Path, tok_dir: Path, train: list[str], val: list[str], seq_len: int,
                    separator: bool = True, n_shards: int = 2) -> dict:
    """A mix directory in the manifest contract whose shards are the documents' tokens, packed
    contiguously (+ separator after each document), the tail that does not fill a sample dropped;
    `n_shards` shards per split (so shard boundaries are exercised too)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    sep_id = tok.token_to_id(SEP) if separator else None
    root.mkdir(parents=True, exist_ok=True)
    (root / "tokenizer").mkdir(exist_ok=True)
    (root / "tokenizer/tokenizer.json").write_bytes((tok_dir / "tokenizer.json").read_bytes())
    splits, shard_files = {}, []
    for split, docs in (("train", train), ("val", val)):
        ids = []
        for e in tok.encode_batch(docs, add_special_tokens=False):
            ids += e.ids + ([sep_id] if separator else [])
        samples = len(ids) // seq_len
        assert samples >= 2, "documents too short for this seq_len"
        arr = np.asarray(ids[: samples * seq_len], dtype="<u2")
        cuts = [(samples * i // n_shards) * seq_len for i in range(n_shards + 1)]
        shards = []
        for i, part in enumerate(arr[a:b] for a, b in zip(cuts, cuts[1:])):
            rel = f"{split}/{split}-{i:05d}.bin"
            (root / split).mkdir(exist_ok=True)
            (root / rel).write_bytes(part.tobytes())
            e = file_entry(root, rel)
            shards.append({"path": rel, "samples": len(part) // seq_len, "bytes": e["bytes"], "sha256": e["sha256"]})
            shard_files.append(rel)
        tokens = samples * seq_len
        splits[split] = {"samples": samples, "tokens": tokens, "emitted_tokens": len(ids),
                         "dropped_tail_tokens": len(ids) - tokens, "seam_rate": 0.5, "documents": len(docs),
                         "sources": {"web": len(ids)}, "shards": shards}
    packing = {"rule": "contiguous", "separator": SEP if separator else None, "separator_id": sep_id,
               "seq_len": seq_len, "sample_len": seq_len, "shifted_targets": False}
    rv = write_review_files(root, name="planted", seed=0, splits=splits, packing=packing)
    files = [file_entry(root, p) for p in [*shard_files, "tokenizer/tokenizer.json", *REVIEW_PATHS]]
    tr, va = splits["train"], splits["val"]
    manifest = {
        "format": FORMAT, "name": "planted", "seed": 0, "config_sha256": rv["config_sha256"],
        "tokenizer": {"kind": "file", "repo_id": None, "revision": None, "vocab_size": tok.get_vocab_size(),
                      "special_tokens": {SEP: tok.token_to_id(SEP)},
                      "files": {"tokenizer/tokenizer.json": files[len(shard_files)]["sha256"]}},
        "packing": packing,
        "dtype": "uint16",
        "splits": splits,
        "sources": rv["sources"],
        "totals": {"train_tokens": tr["tokens"], "val_tokens": va["tokens"], "train_samples": tr["samples"],
                   "val_samples": va["samples"], "shards": len(shard_files),
                   "dropped_tail_tokens": tr["dropped_tail_tokens"] + va["dropped_tail_tokens"]},
        "review": rv["review"],
        "files": files,
        "fingerprint": compute_fingerprint(files),
    }
    manifest[INTERPRETATION_KEY] = interpretation_sha256(manifest)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def _kept(docs: list[str], manifest: dict, split: str, tok_dir: Path, separator: bool) -> list[str]:
    """The documents whose tokens made it into the split (the dropped tail removed)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    budget = manifest["splits"][split]["tokens"]
    out = []
    for d, e in zip(docs, tok.encode_batch(docs, add_special_tokens=False)):
        n = len(e.ids) + separator
        if budget <= 0:
            break
        out.append(d if n <= budget else tok.decode(e.ids[:budget]))
        budget -= n
    return out


@pytest.mark.parametrize("seq_len", [8, 13, 37, 256])
def test_counts_equal_the_document_scan_at_any_sample_length(tmp_path, tokenizer_dir, seq_len):
    spec = make_spec(tmp_path)
    train = _docs(1, planted={3: ITEM0, 17: ITEM2, 30: ITEM0.upper().replace(" ", ",  ")})
    val = _docs(2, n=12, planted={5: ITEM2})
    m = write_token_mix(tmp_path / "mix", tokenizer_dir, train, val, seq_len)
    assert check_manifest(m, tmp_path / "mix") == []
    ref = P.load_reference(spec)
    rep = P.audit_published(tmp_path / "mix", spec, tmp_path / "cache", reference=ref, chunk_tokens=5 * seq_len)
    for split, docs in (("train", train), ("val", val)):
        want = ref.registry.scan_texts(_kept(docs, m, split, tokenizer_dir, True)).sum(axis=0)
        got = rep["splits"][split]["tasks"]["demo_qa"]["overlap_ngrams"]
        assert got == int(want[0]) > 0, (split, seq_len)
        assert rep["splits"][split]["short_carries"] == 0
        assert rep["splits"][split]["samples_scanned"] == m["splits"][split]["samples"]
    # a verbatim 19-word item embedded in filler: exactly 19 - 13 + 1 windows per copy
    assert rep["splits"]["val"]["overlap_ngrams"] == len(ITEM2.split()) - 12
    assert rep["overlap_total"] > 0 and not rep["passed"] and P.exit_code(rep) == P.EXIT_OVERLAP
    assert rep["splits"]["train"]["documents"] == len(_kept(train, m, "train", tokenizer_dir, True))


def test_clean_mix_audits_to_zero_with_denominators(tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    write_token_mix(tmp_path / "mix", tokenizer_dir, _docs(1), _docs(2, n=12), 16)
    rep = P.audit_published(tmp_path / "mix", spec, tmp_path / "cache")
    assert rep["overlap_total"] == 0 and rep["passed"] and P.exit_code(rep) == 0
    d = rep["denominators"]["demo_qa"]
    assert d["rows"] == len(EVAL_ROWS) >= d["min_rows"] and d["items"] > 0 and d["ngrams"] > 0
    for row in rep["rows"]:
        assert row["samples_scanned"] > 0 and row["eval_rows"] == d["rows"] and row["eval_ngrams"] == d["ngrams"]


def test_below_min_rows_fails_even_at_zero_overlap(tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    task = spec.audit.tasks[0].model_copy(update={"min_rows": 50})
    spec = spec.model_copy(update={"audit": spec.audit.model_copy(update={"tasks": [task]})})
    write_token_mix(tmp_path / "mix", tokenizer_dir, _docs(1), _docs(2, n=12), 16)
    rep = P.audit_published(tmp_path / "mix", spec, tmp_path / "cache")
    assert rep["overlap_total"] == 0 and not rep["passed"]
    assert rep["denominator_problems"] == ["task demo_qa: 4 rows read, below min_rows 50"]
    assert P.exit_code(rep) == P.EXIT_DENOMINATOR


def test_separator_splits_documents_and_without_it_the_seam_counts(tmp_path, tokenizer_dir):
    """An item cut in two across consecutive documents: not an overlap when the separator marks the
    boundary; counted (honestly: the bytes a model reads hold it) when there is no separator."""
    words = ITEM0.split()
    train = _docs(1)
    train[4] = train[4] + " ".join(words[:9]) + " "
    train[5] = " ".join(words[9:]) + " " + train[5]
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    with_sep = write_token_mix(tmp_path / "sep", tokenizer_dir, train, _docs(2, n=12), 16, separator=True)
    rep = P.audit_published(tmp_path / "sep", spec, tmp_path / "c1", reference=ref)
    assert with_sep["packing"]["separator_id"] is not None and rep["overlap_total"] == 0
    write_token_mix(tmp_path / "nosep", tokenizer_dir, train, _docs(2, n=12), 16, separator=False)
    rep = P.audit_published(tmp_path / "nosep", spec, tmp_path / "c2", reference=ref)
    assert rep["splits"]["train"]["overlap_ngrams"] == len(words) - 12  # every window of the joined item
    assert rep["splits"]["train"]["documents"] is None
    assert "seam" in rep["packing"]["document_boundaries"]
    # and the no-separator scan equals scanning the split as one text
    joined = "".join(_kept(train, with_sep, "train", tokenizer_dir, False))
    assert rep["splits"]["train"]["overlap_ngrams"] <= int(ref.registry.scan_texts([joined]).sum())


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mix_assets.audit_published", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)


def _assert_no_item_text(text: str) -> None:
    assert CANARY not in text.lower()
    items = [f"{r['question']} {c}" for r in EVAL_ROWS for c in r["choices"]]
    assert ct.leaking_strings([text], ct.scrub_ngrams(items, 8), 8) == []
    for w in ("lighthouse", "quartermaster", "sourdough", "barometer", "herring"):
        assert w not in text.lower()


def test_cli_finds_the_planted_item_exits_nonzero_and_prints_no_item_text(tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    write_token_mix(tmp_path / "mix", tokenizer_dir, _docs(1, planted={7: ITEM2}), _docs(2, n=12), 24)
    out = _cli(str(tmp_path / "mix"), "--config", spec.config_path, "--cache-dir", str(tmp_path / "c"),
               "--json", str(tmp_path / "report.json"))
    assert out.returncode == P.EXIT_OVERLAP, out.stderr
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["overlap_total"] == rep["splits"]["train"]["overlap_ngrams"] == len(ITEM2.split()) - 12
    assert rep["splits"]["train"]["samples_with_overlap"] >= 1 and rep["splits"]["val"]["overlap_ngrams"] == 0
    for text in (out.stdout, out.stderr, (tmp_path / "report.json").read_text()):
        _assert_no_item_text(text)
    assert "FAIL" in out.stdout and "demo_qa" in out.stdout


def test_cli_clean_exit_zero_and_errors_exit_two(tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    m = write_token_mix(tmp_path / "mix", tokenizer_dir, _docs(1), _docs(2, n=12), 24)
    out = _cli(str(tmp_path / "mix"), "--config", spec.config_path, "--cache-dir", str(tmp_path / "c"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "PASS" in out.stdout
    # a tokenizer that is not the manifest's (same size, one byte changed): refused by its sha256
    tok = tmp_path / "mix/tokenizer/tokenizer.json"
    data = bytearray(tok.read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\n")
    tok.write_bytes(bytes(data))
    out = _cli(str(tmp_path / "mix"), "--config", spec.config_path, "--cache-dir", str(tmp_path / "c"))
    assert out.returncode == 2 and "tokenizer/tokenizer.json" in out.stderr and "sha256" in out.stderr, out.stderr
    assert m["files"][-5]["path"] == "tokenizer/tokenizer.json"


def test_cli_refuses_a_test_split_before_reading_it(tmp_path):
    cfg = Path(make_spec(tmp_path).config_path)
    cfg.write_text(cfg.read_text().replace("- validation", "- test"))
    out = _cli(str(tmp_path / "nomix"), "--config", str(cfg))
    assert out.returncode == 2 and "test splits are never audited" in out.stderr
    _assert_no_item_text(out.stderr + out.stdout)


def test_tails_match_the_tail_of_parts_the_old_scanner_kept():
    """`_tails` (a formula on positions) against the old scanner's `_Tail` fed the same parts: the
    document's first part, then whole samples; its length and whether it still starts the document."""
    from mix_assets_tests.oracles.published_audit_ref import _Tail

    rng = random.Random(5)
    for _ in range(300):
        slen, cap = rng.randint(1, 9), rng.randint(1, 40)
        start = rng.randint(0, 5 * slen)
        tail, at = _Tail(cap), (start // slen + 1) * slen
        tail.append(np.arange(start, at))
        for _ in range(rng.randint(0, 12)):
            size, whole = P._tails(np.array([at]), np.array([start]), slen, cap)
            assert (int(size[0]), bool(whole[0])) == (tail.total, tail.from_start), (slen, cap, start, at)
            tail.append(np.arange(at, at + slen))
            at += slen
    size, whole = P._tails(np.array([10 ** 6]), np.array([P._FAR]), 7, 30)
    assert (int(size[0]), bool(whole[0])) == (35, False)  # a start beyond the tail: the capped tail


def _long_words_docs(seed: int, n: int, planted: dict[int, str]) -> list[str]:
    """Documents of long random letter strings: many tokens per word, so a carry of 4 x 14 tokens
    holds fewer than 14 words and has to grow."""
    rng = random.Random(seed)
    word = lambda: "".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(rng.randint(8, 14)))  # noqa: E731
    docs = [" ".join(word() for _ in range(rng.randint(30, 60))) + " " for _ in range(n)]
    for i, item in planted.items():
        docs[i] = " ".join(word() for _ in range(20)) + " " + item + " " + " ".join(word() for _ in range(5)) + " "
    return docs


def test_carries_grow_over_many_token_words_and_short_ones_are_counted(tmp_path):
    """A near character-level tokenizer (the byte alphabet + a few merges): an item's 13 words take
    far more than the first carry of 4 x 14 tokens, so the carry must grow to find them."""
    tok_dir = tmp_path / "chartok"
    train_bpe([filler(random.Random(9), 50)], 270, [SEP], str(tok_dir))
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    train = _long_words_docs(3, 20, {4: ITEM0, 11: ITEM2})
    m = write_token_mix(tmp_path / "mix", tok_dir, train, _long_words_docs(4, 6, {}), 12)
    want = int(ref.registry.scan_texts(_kept(train, m, "train", tok_dir, True)).sum())
    rep = P.audit_published(tmp_path / "mix", spec, tmp_path / "c", reference=ref, chunk_tokens=100)
    assert rep["splits"]["train"]["overlap_ngrams"] == want > 0
    assert rep["splits"]["train"]["short_carries"] == 0
    # a tail cap too small to hold n + 1 words: the boundaries are counted, not hidden
    rep = P.audit_published(tmp_path / "mix", spec, tmp_path / "c", reference=ref, max_carry_tokens=20)
    assert rep["splits"]["train"]["short_carries"] > 0


def test_reads_the_revision_from_s3_with_a_read_only_identity(tmp_path, tokenizer_dir, seaweedfs):
    """Same counts from s3:// as from the local directory; the tokenizer comes through the reader."""
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    root = tmp_path / "mix"
    write_token_mix(root, tokenizer_dir, _docs(1, planted={9: ITEM0}), _docs(2, n=12), 24)
    url = seaweedfs.upload_dir(root, "pubaudit")
    local = P.audit_published(root, spec, tmp_path / "c1", reference=ref)
    remote = P.audit_published(url, spec, tmp_path / "c2", reference=ref,
                               s3_client=seaweedfs.client("reader"))
    assert remote["splits"] == local["splits"] and remote["overlap_total"] == len(ITEM0.split()) - 12
    assert (tmp_path / "c2" / "objects").is_dir()  # shards and tokenizer were fetched into the cache
