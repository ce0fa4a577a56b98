import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.lib import dedup as lib
from mix_assets_tests.support.shared_data import long_text, paragraphs


def _write(path, source, texts, ids=None):
    ids = ids or [f"{source}-{i:05d}" for i in range(len(texts))]
    t = pa.table({
        "doc_id": ids, "source": [source] * len(texts), "text": texts,
        "row_index": list(range(len(texts))), "origin": [f"{source}:{i}" for i in range(len(texts))],
        "n_bytes": [len(x.encode()) for x in texts], "n_chars": [len(x) for x in texts],
        "est_tokens": [len(x) // 4 for x in texts],
    })
    pq.write_table(t, path)
    return str(path)


def _docs(source, k, per, root):
    ps = paragraphs(source, root)
    docs = ["\n\n".join(ps[i : i + per]) for i in range(0, per * k, per)]
    return [d for d in docs if d]


def test_cross_source_near_duplicate_planted_in_real_text(tmp_path, real_data):
    sherlock = _docs("sherlock_holmes", 120, 6, real_data)
    speeches = _docs("nltk_state_union", 120, 1, real_data)
    near_id, exact_id = f"speeches-{len(speeches):05d}", f"speeches-{len(speeches) + 1:05d}"
    rng = random.Random(4)
    planted = sherlock[17].split(" ")
    for _ in range(2):  # two word edits in ~250 words: Jaccard ~0.9
        planted[rng.randrange(len(planted))] = "indeed"
    speeches.append(" ".join(planted))
    speeches.append(sherlock[40].replace(".", " .").upper())  # an exact duplicate after normalisation
    paths = {
        "sherlock": _write(tmp_path / "a.parquet", "sherlock", sherlock),
        "speeches": _write(tmp_path / "b.parquet", "speeches", speeches),
    }
    table, stats = lib.dedup_keys_table(paths, {"sherlock": 0, "speeches": 1}, lib.DedupParams())
    d = {r["doc_id"]: r for r in table.to_pylist()}
    near, exact = d[near_id], d[exact_id]
    assert near["cluster_id"] == "sherlock-00017" or d["sherlock-00017"]["cluster_id"] == near_id
    assert {near["reason"], d["sherlock-00017"]["reason"]} == {None, "near_dup"}
    assert near["cluster_size"] == 2 and near["jaccard_to_kept"] > 0.8
    # Exact copy: same normalised text; equal length ties go to the higher-priority source (speeches).
    assert exact["exact_key"] == d["sherlock-00040"]["exact_key"]
    assert exact["cluster_id"] == d["sherlock-00040"]["cluster_id"]
    assert stats["excluded_near_dup"] == 1  # nothing else among the real documents is a near dup
    # The speeches repeat their title paragraphs verbatim: real exact duplicates, caught as such.
    others = [x for x in d.values() if x["reason"] == "exact_dup" and x["doc_id"] not in (exact_id, "sherlock-00040")]
    assert others and all(x["n_words"] < 20 and x["source"] == "speeches" for x in others)
    assert lib.check_clusters(table) == []


def test_bad_input_empty_short_long_and_non_ascii(tmp_path):
    long_doc = long_text(1_000_000)  # ~ 1 MB in one document
    texts = ["", "   \n\t", "!!! ???", "two words", "Two   words!", "three little words",
             "Ελληνικά κείμενα, και русский текст и ещё немного слов здесь", long_doc, long_doc + " the end"]
    paths = {"s": _write(tmp_path / "s.parquet", "s", texts)}
    table, stats = lib.dedup_keys_table(paths, {}, lib.DedupParams())
    r = {x["doc_id"]: x for x in table.to_pylist()}
    # Documents without words: exact duplicates of each other only (never LSH-clustered).
    assert stats["no_shingle_documents"] == 3
    assert sorted(r[f"s-0000{i}"]["reason"] or "keep" for i in range(3)) == ["exact_dup", "exact_dup", "keep"]
    # Short documents (< 5 words) are one shingle: equal words -> exact dup, otherwise distinct.
    assert {r["s-00003"]["reason"], r["s-00004"]["reason"]} == {None, "exact_dup"}
    assert r["s-00005"]["reason"] is None and r["s-00005"]["cluster_size"] == 1
    assert r["s-00006"]["n_words"] == 10 and r["s-00006"]["reason"] is None
    # The very long document and its extension are near duplicates; the longer survives.
    assert r["s-00007"]["reason"] == "near_dup" and r["s-00007"]["cluster_id"] == "s-00008"
    assert lib.check_clusters(table) == []


def test_null_text_is_refused_with_file_row_and_field(tmp_path):
    t = pa.table({"doc_id": ["a", "b"], "text": ["fine text here", None], "n_chars": [14, 0]})
    pq.write_table(t, tmp_path / "x.parquet")
    with pytest.raises(lib.DedupInputError, match=r"x\.parquet: row 1: field 'text' is null"):
        lib.dedup_keys_table({"x": str(tmp_path / "x.parquet")}, {}, lib.DedupParams())


def test_exclusions_union_reasons_and_samples_skip_contaminated():
    keys = pa.table({
        "doc_id": ["a", "b", "c", "d", "e"], "source": ["s"] * 5, "reason": [None, "near_dup", None, "exact_dup", None],
        "cluster_id": ["a", "a", "c", "c", "e"], "jaccard_to_kept": [1.0, 0.85, 1.0, 1.0, 1.0],
    })
    cont = pa.table({"doc_id": ["b", "c"]})
    t = lib.exclusion_table(keys, cont).to_pylist()
    assert t == [
        {"doc_id": "b", "source": "s", "reasons": ["contaminated", "near_dup"], "kept_doc_id": "a"},
        {"doc_id": "c", "source": "s", "reasons": ["contaminated"], "kept_doc_id": None},
        {"doc_id": "d", "source": "s", "reasons": ["exact_dup"], "kept_doc_id": "c"},
    ]
    samples = lib.reject_samples(keys, {"b", "c"})
    assert samples == {"exact_dup": [], "near_dup": []}  # b is contaminated, d's kept doc c is too
    assert lib.reject_samples(keys, set())["near_dup"] == [("b", "a", 0.85)]
    with pytest.raises(lib.DedupInputError, match="'zz' is not in the dedup keys"):
        lib.exclusion_table(keys, pa.table({"doc_id": ["zz"]}))
