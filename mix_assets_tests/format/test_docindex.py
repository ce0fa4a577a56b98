"""packing.doc_index: the per-shard index of document starts (format/docindex.py), written by token_shards,
checked by the manifest checker and read by MixReader.doc_starts."""

import hashlib
import json

import numpy as np
import pytest

from mix_assets.format import docindex
from mix_assets.stages.audit import published as P
from mix_assets.format.checker import check_manifest
from mix_assets.format.manifest import compute_fingerprint
from mix_assets.format.shards import ShardRecord
from mix_assets.stages.tokens.packing import Packer
from mix_assets.reader import NoDocIndexError, ShardCorruptError, open_mix
from mix_assets_tests.stages.tokens.test_tokens_pipeline import build


def _pack(lengths, sample_len, shard_samples):
    """(index per shard, true starts per shard) of documents of `lengths` packed contiguously."""
    shards, index = [], {}

    def write(i, tokens):
        shards.append(len(tokens))
        return ShardRecord(f"train/{i}.bin", len(tokens) // sample_len, len(tokens) * 2, "0" * 64)

    def write_index(i, starts):
        index[i] = starts.copy()
        return {"path": f"doc_index/train/{i}.docs.npy", "bytes": 0, "sha256": "0" * 64, "documents": len(starts)}

    p = Packer(sample_len, shard_samples, "uint16", write, write_index)
    for n in lengths:
        p.feed(np.zeros(n, np.uint16), "s")
    p.finish()
    true = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    true = true[np.asarray(lengths) > 0]
    edges = np.concatenate([[0], np.cumsum(shards)])
    want = [true[(true >= a) & (true < b)] - a for a, b in zip(edges[:-1], edges[1:])]
    return [index[i] for i in range(len(shards))], want


@pytest.mark.parametrize("sample_len,shard_samples", [(8, 1), (8, 3), (65, 2), (64, 4)])
def test_packer_index_is_the_true_document_starts(sample_len, shard_samples):
    rng = np.random.default_rng(sample_len + shard_samples)
    lengths = rng.integers(0, 3 * sample_len, 400)  # empty documents included: they start nowhere
    lengths[:3] = [sample_len, sample_len * shard_samples, 1]  # starts exactly on sample and shard edges
    got, want = _pack(lengths.tolist(), sample_len, shard_samples)
    assert len(got) == len(want) > 1
    for g, w in zip(got, want):
        assert g.tolist() == w.tolist()
    # the npy bytes round-trip and sample_starts slices one sample
    starts = docindex.from_bytes(docindex.to_bytes(got[0]), "x", sample_len * shard_samples)
    assert starts.dtype == np.dtype("<u4") and starts.tolist() == got[0].tolist()
    for row in range(shard_samples):
        s = docindex.sample_starts(starts, row, sample_len)
        assert s.tolist() == [int(o) - row * sample_len for o in got[0] if row * sample_len <= o < (row + 1) * sample_len]


def test_segment_ids_mark_documents():
    assert docindex.segment_ids(np.array([0, 3]), 5).tolist() == [1, 1, 1, 2, 2]
    assert docindex.segment_ids(np.array([2]), 4).tolist() == [0, 0, 1, 1]


def _truth(monkeypatch):
    """Stream positions at which token_shards' packers start each document, per packer (train, then val)."""
    seen: list[list[int]] = []
    orig_init, orig_feed, orig_many = Packer.__init__, Packer.feed, Packer.feed_many

    def init(self, *a, **k):
        orig_init(self, *a, **k)
        seen.append([])
        self._truth = seen[-1]

    def feed(self, tokens, source):
        if len(tokens):
            self._truth.append(self.pos)
        orig_feed(self, tokens, source)

    def feed_many(self, tokens, lengths, sources, names):
        n = np.asarray(lengths, np.int64)
        self._truth.extend((self.pos + np.cumsum(n) - n)[n > 0].tolist())
        orig_many(self, tokens, lengths, sources, names)

    monkeypatch.setattr(Packer, "__init__", init)
    monkeypatch.setattr(Packer, "feed", feed)
    monkeypatch.setattr(Packer, "feed_many", feed_many)
    return seen


CONFIGS = {
    "contiguous": {},
    "separator": {"separator": "<|endoftext|>"},
    "separator_shifted": {"separator": "<|endoftext|>", "shifted_targets": True},
    "shifted_two_per_shard": {"shifted_targets": True, "shard_tokens": 1024},
}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_built_index_is_the_true_boundaries_and_the_reader_returns_them(config, tmp_path, monkeypatch):
    seen = _truth(monkeypatch)
    spec, st, res, man = build(tmp_path, packing=CONFIGS[config])
    assert check_manifest(man, tmp_path / "mix") == []  # shape, count, separator agreement read back
    L = man["packing"]["sample_len"]
    for split, truth in zip(("train", "val"), seen):
        truth = np.asarray(truth)
        r = open_mix(str(tmp_path / "mix"), cache_dir=str(tmp_path / "cache"), split=split, shuffle_seed=3)
        assert r.has_doc_index
        at, seams = 0, 0
        for sh in man["splits"][split]["shards"]:
            data = (tmp_path / "mix" / sh["doc_index"]["path"]).read_bytes()
            got = np.load(tmp_path / "mix" / sh["doc_index"]["path"])
            n = sh["samples"] * L
            assert got.tolist() == (truth[(truth >= at) & (truth < at + n)] - at).tolist()
            assert sh["doc_index"]["sha256"] == hashlib.sha256(data).hexdigest()
            seams += len(np.unique(got[got % L != 0] // L))  # a trainer's seam count from the index alone
            at += n
        assert seams == res.splits[split].seam_samples and seams / len(r) == man["splits"][split]["seam_rate"]
        rng = np.random.default_rng(0)
        for k in rng.integers(0, len(r), 25).tolist():
            g = r.storage_index(k)
            want = truth[(truth >= g * L) & (truth < (g + 1) * L)] - g * L
            assert r.doc_starts(k).tolist() == want.tolist()
            assert r.segment_ids(k)[want].tolist() == list(range(1, len(want) + 1))
            if man["packing"]["separator"] is not None:  # each start but a budget-cut one follows a separator
                tokens = r.sample(k)
                inner = [o for o in want if o > 0]
                assert sum(int(tokens[o - 1]) != 0 for o in inner) <= len(spec.sources)


def _rewrite(man: dict, mix, rel: str, data: bytes) -> None:
    """Replace a file and make the manifest agree with it again (sha256, bytes, fingerprint)."""
    (mix / rel).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    for f in man["files"]:
        if f["path"] == rel:
            f.update(bytes=len(data), sha256=sha)
    for sp in man["splits"].values():
        for sh in sp["shards"]:
            if sh["doc_index"]["path"] == rel:
                sh["doc_index"].update(bytes=len(data), sha256=sha)
    man["fingerprint"] = compute_fingerprint(man["files"])
    (mix / "manifest.json").write_text(json.dumps(man, indent=1) + "\n")


def test_corrupted_index_is_refused_naming_the_file(tmp_path):
    spec, st, res, man = build(tmp_path, packing={"separator": "<|endoftext|>"})
    mix = tmp_path / "mix"
    rel = man["splits"]["train"]["shards"][1]["doc_index"]["path"]
    path = mix / rel
    good = path.read_bytes()
    path.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    problems = check_manifest(man, mix, strict=False)
    assert any(p.startswith(f"{rel}: sha256") for p in problems), problems
    r = open_mix(str(mix), cache_dir=str(tmp_path / "cache"), split="train", shuffle=False)
    first = man["splits"]["train"]["shards"][0]["samples"]
    with pytest.raises(ShardCorruptError, match=rel):
        r.doc_starts(first)
    # an index whose hash is re-recorded but whose starts disagree with the separator
    starts = docindex.from_bytes(good, rel, 10**9)
    bad = starts.copy()
    bad[1:] = bad[1:] - 1  # every start moved onto the separator itself
    _rewrite(man, mix, rel, docindex.to_bytes(bad))
    problems = check_manifest(man, mix, strict=False)
    assert any(p.startswith(f"{rel}: document start at offset") and "does not follow the separator" in p
               for p in problems), problems
    # ... which published_readable_from_empty_cache's checker call (no re-hash) and the shards audit see too
    assert check_manifest(man, mix, verify_hashes=False, review_counts=False, doc_index=True, strict=False)
    r = open_mix(str(mix), cache_dir=str(tmp_path / "cache2"), split="train", shuffle=False)
    ranges = P.shard_ranges(r)
    P.check_doc_index(r, ranges[0], 0)  # the untouched first shard passes
    with pytest.raises(P.PublishedAuditError, match=f"{rel}: document start at offset"):
        P.check_doc_index(r, ranges[1], 0)
    head = r.samples(ranges[1].start, ranges[1].stop - ranges[1].start)  # the shard as audit_range read it
    with pytest.raises(P.PublishedAuditError, match=f"{rel}: document start at offset"):
        P.check_doc_index(r, ranges[1], 0, head)
    # not an index at all
    _rewrite(man, mix, rel, b"not a numpy file")
    problems = check_manifest(man, mix, strict=False)
    assert any(p.startswith(f"{rel}: not a readable .npy") for p in problems), problems


def test_revision_without_index_reads_and_doc_starts_says_so(tmp_path):
    spec, st, res, man = build(tmp_path, packing={"doc_index": False})
    mix = tmp_path / "mix"
    assert not (mix / "doc_index").exists()
    # its config reads as one written before the option: a build without the index keeps its fingerprint
    assert "doc_index" not in json.loads((mix / "review" / "mix_config.json").read_text())["packing"]
    assert all("doc_index" not in sh for sp in man["splits"].values() for sh in sp["shards"])
    assert check_manifest(man, mix) == []
    r = open_mix(str(mix), cache_dir=str(tmp_path / "cache"), split="train")
    assert not r.has_doc_index and r.sample(0).shape == (man["packing"]["sample_len"],)
    with pytest.raises(NoDocIndexError, match="has no document index"):
        r.doc_starts(0)


def test_manifest_and_config_must_agree_on_the_index(tmp_path):
    spec, st, res, man = build(tmp_path)
    mix = tmp_path / "mix"
    stripped = json.loads(json.dumps(man))
    ix_paths = [sh.pop("doc_index")["path"] for sp in stripped["splits"].values() for sh in sp["shards"]]
    stripped["files"] = [f for f in stripped["files"] if f["path"] not in ix_paths]
    stripped["fingerprint"] = compute_fingerprint(stripped["files"])
    problems = check_manifest(stripped, None, strict=False)
    assert problems == []  # structurally a revision without an index ...
    problems = check_manifest(stripped, mix, strict=False)  # ... but its config says it has one
    assert any("doc_index: missing" in p and "packing.doc_index = True" in p for p in problems), problems
    half = json.loads(json.dumps(man))
    half["splits"]["val"]["shards"][0].pop("doc_index")
    assert any("shards have a document index" in p for p in check_manifest(half, None, strict=False))
