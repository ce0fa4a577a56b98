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


def test_every_document_the_filters_rejected_gets_a_row_with_its_rule():
    keys = pa.table({"doc_id": ["a", "b", "c"], "source": ["s"] * 3, "reason": [None, "near_dup", None],
                     "cluster_id": ["a", "a", "c"], "jaccard_to_kept": [1.0, 0.9, 1.0]})
    t = lib.exclusion_table(keys, None, {"b": "language:fr", "c": "gopher_quality:min_doc_words"}).to_pylist()
    assert t == [
        {"doc_id": "b", "source": "s", "reasons": ["language:fr", "near_dup"], "kept_doc_id": "a"},
        {"doc_id": "c", "source": "s", "reasons": ["gopher_quality:min_doc_words"], "kept_doc_id": None},
    ]
    with pytest.raises(lib.DedupInputError, match="filter decisions: doc_id 'zz' is not in the dedup keys"):
        lib.exclusion_table(keys, None, {"zz": "language:fr"})


def _check_clusters_reference(table: pa.Table) -> list[str]:
    """check_clusters as it was written with Python dicts per document (the reference for the vectorised one)."""
    problems = []
    d = table.to_pydict()
    n = len(d["doc_id"])
    if len(set(d["doc_id"])) != n:
        problems.append("doc_id is not unique")
    members: dict = {}
    for i, c in enumerate(d["cluster_id"]):
        members.setdefault(c, []).append(i)
    index = {x: i for i, x in enumerate(d["doc_id"])}
    for c, rows in members.items():
        kept = [i for i in rows if d["keep"][i]]
        if c not in index or not d["keep"][index[c]]:
            problems.append(f"cluster {c}: its id is not a kept document")
        if len(kept) != 1:
            problems.append(f"cluster {c}: {len(kept)} kept members (expected 1)")
        if any(d["cluster_size"][i] != len(rows) for i in rows):
            problems.append(f"cluster {c}: cluster_size differs from its {len(rows)} members")
        for i in rows:
            want = None if d["keep"][i] else ("exact_dup" if d["exact_key"][i] == d["exact_key"][index[c]] else "near_dup")
            if d["reason"][i] != want:
                problems.append(f"doc {d['doc_id'][i]}: reason {d['reason'][i]!r}, expected {want!r}")
    by_key: dict = {}
    for k, c in zip(d["exact_key"], d["cluster_id"]):
        by_key.setdefault(k, set()).add(c)
    split = [k for k, cs in by_key.items() if len(cs) > 1]
    if split:
        problems.append(f"{len(split)} exact key(s) spread over several clusters")
    return problems[:20]


def _consistent_keys(rng: random.Random, n_clusters: int) -> list[dict]:
    rows = []
    for c in range(n_clusters):
        size = rng.choice([1, 1, 2, 3, 4])
        cid = f"d{c:05d}-0"
        for m in range(size):
            exact = m and rng.random() < 0.5
            rows.append(dict(doc_id=f"d{c:05d}-{m}", source="s", exact_key=f"k{c}" if exact or not m else f"k{c}-{m}",
                             cluster_id=cid, cluster_size=size, keep=not m,
                             reason=None if not m else ("exact_dup" if exact else "near_dup"),
                             jaccard_to_kept=1.0, n_words=10))
    rng.shuffle(rows)
    return rows


@pytest.mark.parametrize("seed", range(12))
def test_check_clusters_equals_the_per_document_reference(seed):
    rng = random.Random(seed)
    rows = _consistent_keys(rng, 60)
    assert lib.check_clusters(pa.Table.from_pylist(rows, schema=lib.DEDUP_SCHEMA)) == []
    assert lib.check_clusters(lib.DEDUP_SCHEMA.empty_table()) == []
    kept_ids = [r["doc_id"] for r in rows if r["keep"]]
    dropped_ids = [r["doc_id"] for r in rows if not r["keep"]]
    for _ in range(rng.randint(1, 30) if seed else 0):
        r = rng.choice(rows)
        what = rng.randrange(7)
        if what == 0:
            r["keep"] = not r["keep"]
        elif what == 1:
            r["cluster_size"] += rng.choice([-1, 1])
        elif what == 2:
            r["reason"] = rng.choice([None, "exact_dup", "near_dup", "other"])
        elif what == 3 and dropped_ids:  # the cluster id names a document that is not kept
            r["cluster_id"] = rng.choice(dropped_ids)
        elif what == 4:
            r["cluster_id"] = rng.choice(kept_ids)
        elif what == 5:
            r["exact_key"] = rng.choice(rows)["exact_key"]
        else:
            r["doc_id"] = rng.choice(rows)["doc_id"]
    if any(r["cluster_id"] not in {x["doc_id"] for x in rows} and not r["keep"] for r in rows):
        return  # the reference raises KeyError there (a cluster id naming no document, with a dropped member)
    table = pa.Table.from_pylist(rows, schema=lib.DEDUP_SCHEMA)
    want = _check_clusters_reference(table)
    assert lib.check_clusters(table) == want
    assert bool(want) == bool(seed)
