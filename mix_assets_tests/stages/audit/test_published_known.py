"""stages/audit/published.KnownClean: an audit that skips hashing the windows of documents an earlier audit found
clean writes the report a full audit writes, still finds what the new revision holds (new documents, a clean
document edited to hold an item), still refuses a corrupted shard, and trusts only a filed record whose blob
hashes to its name."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mix_assets.core import engine as eng
from mix_assets.core import objects
from mix_assets.core.storage import Storage
from mix_assets.reader.errors import ReaderError
from mix_assets.stages.audit import published as P
from mix_assets_tests.stages.audit.test_published import (ITEM0, ITEM2, _docs, tokenizer_dir,  # noqa: F401 - fixture
                                                       write_token_mix)
from mix_assets_tests.support.audit_fixtures import filler, make_spec


def _revisions(tmp_path, tok_dir, seq_len: int):
    """Revision A; revision B: A's documents with new ones inserted between them (every sample cut moves), one
    new document holding an item, and one of A's clean documents edited to hold one."""
    train_a = _docs(1, n=60, planted={3: ITEM0})
    val_a = _docs(2, n=12)
    rng = random.Random(7)
    train_b = list(train_a)
    for k in (5, 17, 29, 41):
        train_b.insert(k, filler(rng, rng.randint(20, 90)) + " ")
    train_b.insert(33, filler(rng, 30) + " " + ITEM2 + " " + filler(rng, 20) + " ")
    edited = 50
    assert ITEM0 not in train_b[edited] and ITEM2 not in train_b[edited]
    train_b[edited] = train_b[edited] + ITEM2 + " "
    val_b = [filler(rng, 40) + " "] + val_a
    ma = write_token_mix(tmp_path / "a", tok_dir, train_a, val_a, seq_len, n_shards=3)
    mb = write_token_mix(tmp_path / "b", tok_dir, train_b, val_b, seq_len, n_shards=4)
    return ma, mb


@pytest.mark.parametrize("seq_len,workers", [(13, 1), (37, 2), (64, 2)])
def test_known_clean_documents_give_the_full_audits_report(tmp_path, tokenizer_dir, seq_len, workers):
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    _revisions(tmp_path, tokenizer_dir, seq_len)
    e = eng.Engine(num_cpus=workers)
    first = P.KnownClean()
    rep_a = P.audit_published(tmp_path / "a", spec, tmp_path / "c0", reference=ref, eng=e, clean=first)
    assert rep_a["overlap_total"] > 0 and first.pieces == 0 and len(first.found) > 40
    full = P.audit_published(tmp_path / "b", spec, tmp_path / "c1", reference=ref, eng=e)
    memo = P.KnownClean(known=first.found)
    reused = P.audit_published(tmp_path / "b", spec, tmp_path / "c2", reference=ref, eng=e, clean=memo)
    assert P.dumps(reused) == P.dumps(full)
    # most pieces were answered from A's clean documents; the new and the edited ones were scanned and found
    assert memo.all_pieces == sum(full["splits"][s]["pieces"] for s in P.SPLITS)
    assert memo.all_pieces // 2 < memo.pieces < memo.all_pieces
    assert full["splits"]["train"]["overlap_ngrams"] > rep_a["splits"]["train"]["overlap_ngrams"] > 0
    # B's clean documents: A's that B still holds, and B's new clean ones; never one with an item
    new = {tuple(r) for r in memo.found.tolist()} - {tuple(r) for r in first.found.tolist()}
    assert len(memo.found) and len(new) >= 4


def test_a_memo_without_a_documents_digest_scans_it(tmp_path, tokenizer_dir):
    """The memo only ever skips what it names: emptied of every digest, the audit equals the full one and skips
    nothing; an unknown digest (not in B) changes nothing."""
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    _revisions(tmp_path, tokenizer_dir, 16)
    full = P.audit_published(tmp_path / "b", spec, tmp_path / "c1", reference=ref)
    memo = P.KnownClean(known=np.array([[0, 12345]], np.uint64))
    assert P.dumps(P.audit_published(tmp_path / "b", spec, tmp_path / "c2", reference=ref, clean=memo)) == P.dumps(full)
    assert memo.pieces == 0


def test_a_corrupted_shard_still_fails_with_every_document_known(tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    _revisions(tmp_path, tokenizer_dir, 16)
    memo = P.KnownClean()
    P.audit_published(tmp_path / "b", spec, tmp_path / "c1", reference=ref, clean=memo)
    shard = tmp_path / "b" / "train" / "train-00001.bin"
    data = bytearray(shard.read_bytes())
    data[10] ^= 0xFF  # one token changed: the bytes are no longer the manifest's
    shard.write_bytes(bytes(data))
    with pytest.raises(ReaderError):
        P.audit_published(tmp_path / "b", spec, tmp_path / "c2", reference=ref,
                          clean=P.KnownClean(known=memo.found))


def test_filed_clean_documents_load_back_and_a_changed_blob_is_not_trusted(tmp_path):
    st = Storage(root=str(tmp_path / "root"))
    found = np.array([[0, 1], [1 << 63, 5], [0, 2 ** 64 - 1], [1, 0], [0, 1]], np.uint64)
    P.file_known_clean(st, "ctx", "fp1", found, "audit/known.bin")
    got = P.load_known_clean(st, "ctx").known
    assert got.tolist() == [[0, 1], [0, 2 ** 64 - 1], [1, 0], [1 << 63, 5]]  # distinct, sorted
    assert P.member_rows(got, found).all() and not P.member_rows(got, np.array([[0, 2]], np.uint64)).any()
    assert len(P.load_known_clean(st, "other").known) == 0
    assert not st.exists("audit/known.bin")  # the working file is removed once filed
    (rec,) = objects.keyed_records(st, P.KNOWN_CLEAN)
    (sha,) = rec["outputs"].values()
    blob = tmp_path / "root" / objects.object_key(sha)
    blob.chmod(0o644)
    blob.write_bytes(b"\x00" * 32)
    assert len(P.load_known_clean(st, "ctx").known) == 0


@pytest.fixture(scope="module")
def ray_instance():
    from mix_assets_tests.support.ray_local import local_ray

    with local_ray(eng.Engine(kind="ray", num_cpus=2)) as ray:
        yield ray


@pytest.mark.ray
def test_ray_tasks_take_the_known_documents_and_write_the_in_process_report(ray_instance, tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    _revisions(tmp_path, tokenizer_dir, 16)
    first = P.KnownClean()
    P.audit_published(tmp_path / "a", spec, tmp_path / "c0", reference=ref, clean=first)
    local = P.audit_published(tmp_path / "b", spec, tmp_path / "c1", reference=ref)
    memo = P.KnownClean(known=first.found)
    on_ray = P.audit_published(tmp_path / "b", spec, tmp_path / "c2", reference=ref,
                               eng=eng.Engine(kind="ray", num_cpus=2), clean=memo)
    assert P.dumps(on_ray) == P.dumps(local) and memo.pieces > 0 and local["overlap_total"] > 0
