"""stages/tokens/reference_ids.py: HF's ids of the exactness sample, filed per source and reused per document."""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers

from mix_assets.core import objects
from mix_assets.core.storage import Storage
from mix_assets.stages.tokens import backends, reference_ids


class Counting(backends.HFEncoder):
    def __init__(self, tok):
        super().__init__(tok)
        self.texts: list[str] = []

    def encode(self, texts, threads=1):
        self.texts += texts
        return super().encode(texts, threads)


def _tok() -> Tokenizer:
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1, "b": 2, "c": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def test_only_texts_no_stored_sample_holds_are_encoded_and_a_changed_blob_is_never_read(tmp_path):
    st, tok = Storage(str(tmp_path / "root")), _tok()
    old = ["a b", "b c", "c a a", "zzz"]
    enc = Counting(tok)
    want = [e.ids for e in tok.encode_batch_fast(old + ["a", "c c"], add_special_tokens=False)]
    assert reference_ids.ReferenceIds(st, "t1", enc).ids("web", old) == want[:4] and enc.texts == old
    # the next build's sample of web: one text gone, two new; only the new ones are encoded
    new = ["b c", "a", "c a a", "c c", "zzz"]
    enc, ref = Counting(tok), None
    ref = reference_ids.ReferenceIds(st, "t1", enc)
    assert ref.ids("web", new) == [want[1], want[4], want[2], want[5], want[3]]
    assert enc.texts == ["a", "c c"] and (ref.reused, ref.encoded) == (3, 2)
    # the same sample again: its own record answers, nothing encoded
    enc = Counting(tok)
    assert reference_ids.ReferenceIds(st, "t1", enc).ids("web", new)[1] == want[4] and enc.texts == []
    # another tokenizer file or another source: nothing reused
    enc = Counting(tok)
    reference_ids.ReferenceIds(st, "t2", enc).ids("web", new)
    reference_ids.ReferenceIds(st, "t1", enc).ids("books", ["a"])
    assert enc.texts == new + ["a"]
    # a blob changed in the store is not read: the texts are encoded again and the blob filed again
    ref = reference_ids.ReferenceIds(st, "t1", Counting(tok))
    rec = objects.read_keyed(st, reference_ids.ASSET, ref.key("web", [reference_ids.text_key(t) for t in new]))
    (sha,) = rec["outputs"].values()
    blob = tmp_path / "root" / objects.object_key(sha)
    blob.write_bytes(b"not the ids")
    enc = Counting(tok)
    for r in st.list(objects.KEYED + "/" + reference_ids.ASSET):  # only this record is left to answer
        if not r.endswith(f"{rec['key']}.json"):
            st.delete(r)
    assert reference_ids.ReferenceIds(st, "t1", enc).ids("web", new) == [want[1], want[4], want[2], want[5], want[3]]
    assert enc.texts == new and objects.blob_problem(st, sha) is None


def test_a_sample_of_the_same_doc_ids_of_the_same_file_is_read_by_file_and_nothing_else_is(tmp_path):
    """`by_file` answers only for exactly the doc ids, documents-file sha256 and reading code it was filed under,
    with the ids `arrays` gave (no text, no encoder); a changed blob is not read."""
    st, tok = Storage(str(tmp_path / "root")), _tok()
    texts, ids = ["a b", "b c", "c a a"], ["d1", "d2", "d3"]
    want = [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]
    ref = reference_ids.ReferenceIds(st, "t1", Counting(tok))
    assert ref.by_file("web", "f1", ids, "r1") is None
    got = ref.arrays("web", texts)
    ref.file_by_file("web", "f1", ids, "r1", texts)
    enc = Counting(tok)
    again = reference_ids.ReferenceIds(st, "t1", enc)
    assert [a.tolist() for a in again.by_file("web", "f1", ids, "r1")] == want == [a.tolist() for a in got]
    assert enc.texts == [] and again.reused == 3
    for other in (("web", "f2", ids, "r1"), ("web", "f1", ids[::-1], "r1"), ("web", "f1", ids, "r2"),
                  ("books", "f1", ids, "r1")):
        assert again.by_file(*other) is None
    assert reference_ids.ReferenceIds(st, "t2", enc).by_file("web", "f1", ids, "r1") is None  # another tokenizer
    (rec,) = objects.keyed_records(st, reference_ids.BY_FILE)
    (sha,) = rec["outputs"].values()
    (tmp_path / "root" / objects.object_key(sha)).write_bytes(b"not the ids")
    assert reference_ids.ReferenceIds(st, "t1", enc).by_file("web", "f1", ids, "r1") is None
