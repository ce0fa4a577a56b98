import hashlib
import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mix_assets.core import engine
from mix_assets.stages.dedup import dedup as lib
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
    # Documents without words: never LSH-clustered, exact-keyed on their raw text up to whitespace, so
    # the empty and the blank one are duplicates, "!!! ???" is not (issue 25).
    assert stats["no_shingle_documents"] == 3 and stats["wordless_exact_dup"] == 1
    assert sorted(r[f"s-0000{i}"]["reason"] or "keep" for i in range(2)) == ["exact_dup", "keep"]
    assert r["s-00002"]["reason"] is None and r["s-00002"]["cluster_size"] == 1
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


@pytest.mark.parametrize("hex_keys", [False, True], ids=["short-keys", "sha256-keys"])
@pytest.mark.parametrize("seed", range(12))
def test_check_clusters_equals_the_per_document_reference(seed, hex_keys):
    rng = random.Random(seed)
    rows = _consistent_keys(rng, 60)
    if hex_keys:  # the real keys' form: labelled without a hash table (lsh.key_groups)
        for r in rows:
            r["exact_key"] = hashlib.sha256(r["exact_key"].encode()).hexdigest()
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


@pytest.mark.parametrize("nulls", [("doc_id", 1), ("doc_id", 2), ("exact_key", 1), ("exact_key", 3)])
def test_check_clusters_null_ids_and_keys_equal_the_reference(nulls):
    field, count = nulls
    rows = _consistent_keys(random.Random(7), 40)
    for r in [r for r in rows if not r["keep"]][:count]:
        r[field] = None
    table = pa.Table.from_pylist(rows, schema=lib.DEDUP_SCHEMA)
    want = _check_clusters_reference(table)
    assert lib.check_clusters(table) == want
    assert ("doc_id is not unique" in want) == (field == "doc_id" and count > 1)


# -- the streaming exclusion pass against the per-document code it replaced --------------------------------
def _exclusion_table_reference(dedup_keys: pa.Table, contaminated) -> pa.Table:
    d = dedup_keys.select(["doc_id", "source", "reason", "cluster_id"]).to_pydict()
    rows: dict = {}
    for doc, src, reason, cluster in zip(d["doc_id"], d["source"], d["reason"], d["cluster_id"]):
        if reason is not None:
            rows[doc] = {"doc_id": doc, "source": src, "reasons": {reason}, "kept_doc_id": cluster}
    if contaminated is not None:
        known = dict(zip(d["doc_id"], d["source"]))
        for doc in contaminated.column("doc_id").to_pylist():
            row = rows.setdefault(doc, {"doc_id": doc, "source": known[doc], "reasons": set(), "kept_doc_id": None})
            row["reasons"].add("contaminated")
    out = [dict(r, reasons=sorted(r["reasons"])) for _, r in sorted(rows.items())]
    return pa.Table.from_pylist(out, schema=lib.EXCLUSION_SCHEMA)


def _reject_samples_reference(dedup_keys: pa.Table, contaminated_ids: set, per_reason: int) -> dict:
    d = dedup_keys.select(["doc_id", "reason", "cluster_id", "jaccard_to_kept"]).to_pydict()
    out = {}
    for reason in ("exact_dup", "near_dup"):
        cand = [(doc, kept, float(j)) for doc, r, kept, j in zip(d["doc_id"], d["reason"], d["cluster_id"],
                                                                 d["jaccard_to_kept"])
                if r == reason and doc not in contaminated_ids and kept not in contaminated_ids]
        if reason == "near_dup":
            cand.sort(key=lambda x: (x[2], lib._rank(x[0])))
            half = per_reason // 2 + per_reason % 2
            picked = cand[:half] + sorted(cand[half:], key=lambda x: lib._rank(x[0]))[: per_reason - half]
        else:
            picked = sorted(cand, key=lambda x: lib._rank(x[0]))[:per_reason]
        out[reason] = picked
    return out


def _composition_reference(docs: pa.Table, excluded_ids: set, sources) -> list:
    agg = {}
    for s in list(sources) + docs.column("source").to_pylist():
        agg.setdefault(s, dict(source=s, docs_before=0, docs_after=0, bytes_before=0, bytes_after=0,
                               tokens_before=0, tokens_after=0))
    for doc, s, nb, nt in zip(*(docs.column(c).to_pylist() for c in ("doc_id", "source", "n_bytes", "est_tokens"))):
        a = agg[s]
        a["docs_before"], a["bytes_before"], a["tokens_before"] = a["docs_before"] + 1, a["bytes_before"] + nb, \
            a["tokens_before"] + nt
        if doc not in excluded_ids:
            a["docs_after"], a["bytes_after"], a["tokens_after"] = a["docs_after"] + 1, a["bytes_after"] + nb, \
                a["tokens_after"] + nt
    tb = sum(a["tokens_before"] for a in agg.values()) or 1
    ta = sum(a["tokens_after"] for a in agg.values()) or 1
    for a in agg.values():
        a.update(share_before=a["tokens_before"] / tb, share_after=a["tokens_after"] / ta,
                 lost_token_share=1 - a["tokens_after"] / a["tokens_before"] if a["tokens_before"] else 0.0)
    return [agg[s] for s in sorted(agg)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streaming_exclusions_equal_the_per_document_reference(seed, tmp_path, monkeypatch):
    rng = random.Random(seed)
    n = 3000
    ids = sorted(f"{rng.choice('abc')}-{rng.getrandbits(40):010x}" for _ in range(n))
    reasons = [rng.choice([None, None, None, "exact_dup", "near_dup"]) for _ in range(n)]
    keys = pa.table({"doc_id": ids, "source": [i[0] for i in ids], "reason": reasons,
                     "cluster_id": [rng.choice(ids) for _ in range(n)],
                     "jaccard_to_kept": pa.array([round(rng.uniform(0.8, 1.0), 2) for _ in range(n)], pa.float32())})
    cont_ids = rng.sample(ids, 150) + ids[:3]  # repeated ids, as the contamination report may list a doc per task
    cont = pa.table({"doc_id": cont_ids})
    monkeypatch.setattr(lib, "KEY_BATCH_ROWS", 257)  # many batches, a reason often absent from one
    pq.write_table(keys, tmp_path / "keys.parquet")
    want = _exclusion_table_reference(keys, cont)
    for c in (cont, None):
        seen = lib.Exclusions()
        cids = lib.IdSet(c.column("doc_id")) if c else None
        got = pa.concat_tables(lib.exclusion_batches(str(tmp_path / "keys.parquet"), cids, seen))
        ref = want if c else _exclusion_table_reference(keys, None)
        assert got.equals(ref)
        assert seen.documents == n and len(seen.excluded) == ref.num_rows
        assert seen.per_reason == {r: sum(r in rs for rs in ref.column("reasons").to_pylist())
                                   for r in ("exact_dup", "near_dup", "contaminated")}
    assert lib.exclusion_table(keys, cont).equals(want)
    for per in (0, 1, 4, 5):
        assert lib.reject_samples(keys, set(cont_ids), per) == _reject_samples_reference(keys, set(cont_ids), per)
        assert lib.reject_samples(str(tmp_path / "keys.parquet"), lib.IdSet(cont_ids), per) == \
            _reject_samples_reference(keys, set(cont_ids), per)
    docs = pa.table({"doc_id": ids, "source": [i[0] for i in ids], "n_bytes": [rng.randrange(1, 10**6) for _ in ids],
                     "est_tokens": [rng.randrange(0, 10**5) for _ in ids]})
    excluded = set(want.column("doc_id").to_pylist())
    assert lib.composition(docs.to_batches(100), lib.IdSet(excluded), ["a", "b", "c", "d"]) == \
        _composition_reference(docs, excluded, ["a", "b", "c", "d"])


ENGINES = [engine.Engine(num_cpus=1, chunk_rows=1), engine.Engine(num_cpus=2, chunk_rows=300),
           engine.Engine(num_cpus=2, chunk_rows=100_000)]


@pytest.mark.parametrize("eng", ENGINES, ids=["1x257", "2x300", "2xall"])
def test_exclusion_tasks_give_the_same_rows_and_bytes_for_any_range_and_worker_count(eng, tmp_path, monkeypatch):
    """exclusion_masks' three passes as tasks over row ranges (issue 29): rows, file bytes, counts, samples and
    composition equal the one-process stream's, whatever the ranges (257 rows to all) and the workers."""
    rng = random.Random(7)
    n = 3000
    ids = sorted(f"{rng.choice('abc')}-{rng.getrandbits(40):010x}" for _ in range(n))
    keys = pa.table({"doc_id": ids, "source": [i[0] for i in ids],
                     "reason": [rng.choice([None, None, "exact_dup", "near_dup"]) for _ in range(n)],
                     "cluster_id": [rng.choice(ids) for _ in range(n)],
                     "jaccard_to_kept": pa.array([round(rng.uniform(0.8, 1.0), 2) for _ in range(n)], pa.float32())})
    pq.write_table(keys, tmp_path / "keys.parquet", row_group_size=700)
    cont = lib.IdSet(rng.sample(ids, 150))
    rejected = lib.Rejections.of(rng.sample(ids, 200), [rng.choice(["language:fr", "length"]) for _ in range(200)])
    monkeypatch.setattr(lib, "KEY_BATCH_ROWS", 257)

    def masks(keys_src, e):
        seen = lib.Exclusions()
        got = list(lib.exclusion_batches(keys_src, cont, seen, rejected=rejected, eng=e))
        buf = io.BytesIO()
        with pq.ParquetWriter(buf, lib.EXCLUSION_SCHEMA) as w:
            for g in lib.sig.regroup(got, 1000, lib.EXCLUSION_SCHEMA):
                w.write_table(g)
        return buf.getvalue(), seen, len(got)

    want, seen0, _ = masks(keys, None)  # the table, a batch at a time in this process
    got, seen, parts = masks(engine.FileAt(str(tmp_path / "keys.parquet")), eng)
    assert got == want and parts == -(-n // max(eng.chunk_rows, 257))
    assert (seen.documents, seen.per_reason) == (seen0.documents, seen0.per_reason) and seen.per_reason["filtered"]
    assert (seen.excluded.keys == seen0.excluded.keys).all()
    assert lib.reject_samples(str(tmp_path / "keys.parquet"), cont, 5, eng) == lib.reject_samples(keys, cont, 5)
    docs = pa.table({"doc_id": ids, "source": [i[0] for i in ids], "n_bytes": [rng.randrange(1, 10**6) for _ in ids],
                     "est_tokens": [rng.randrange(0, 10**5) for _ in ids]})
    files = {}
    for src in "abc":
        pq.write_table(docs.filter(pa.compute.equal(docs.column("source"), src)), tmp_path / f"{src}.parquet",
                       row_group_size=400)
        files[src] = engine.FileAt(str(tmp_path / f"{src}.parquet"))
    assert lib.composition_on(files, seen.excluded, ["a", "b", "c", "d"], eng) == \
        _composition_reference(docs, set(seen0.excluded.ids()), ["a", "b", "c", "d"])


def test_exclusion_tasks_refuse_keys_unsorted_across_two_ranges_naming_the_row(tmp_path, monkeypatch):
    keys = pa.table({"doc_id": ["a", "b", "d", "c", "e"], "source": ["s"] * 5, "reason": [None] * 5,
                     "cluster_id": ["a", "b", "d", "c", "e"]})
    pq.write_table(keys, tmp_path / "k.parquet")
    monkeypatch.setattr(lib, "KEY_BATCH_ROWS", 3)  # ranges [0, 3) and [3, 5): the bad row opens the second
    with pytest.raises(lib.DedupInputError, match=r"k\.parquet: row 3: field 'doc_id' is null or not above"):
        list(lib.exclusion_batches(str(tmp_path / "k.parquet"), None, lib.Exclusions(), "k.parquet",
                                   eng=engine.Engine(num_cpus=2, chunk_rows=1)))


def test_exclusion_pass_refuses_unsorted_or_repeated_keys_naming_the_row(tmp_path):
    keys = pa.table({"doc_id": ["a", "c", "b"], "source": ["s"] * 3, "reason": [None] * 3, "cluster_id": ["a", "c", "b"]})
    with pytest.raises(lib.DedupInputError, match=r"k\.parquet: row 2: field 'doc_id' is null or not above the row before"):
        list(lib.exclusion_batches(keys, None, lib.Exclusions(), "k.parquet"))


def test_a_filter_reason_beside_contaminated_is_unioned_in_sorted_order():
    keys = pa.table({"doc_id": ["a", "b", "c"], "source": ["s"] * 3, "reason": [None, "near_dup", None],
                     "cluster_id": ["a", "a", "c"]})
    rejected = lib.Rejections.of(["c", "b"], ["language:fr", "language:fr"])
    seen = lib.Exclusions()
    got = pa.concat_tables(lib.exclusion_batches(keys, lib.IdSet(["b"]), seen, rejected=rejected)).to_pylist()
    assert got == [{"doc_id": "b", "source": "s", "reasons": ["contaminated", "language:fr", "near_dup"], "kept_doc_id": "a"},
                   {"doc_id": "c", "source": "s", "reasons": ["language:fr"], "kept_doc_id": None}]
    assert seen.per_reason["filtered"] == 2
    with pytest.raises(lib.DedupInputError, match="filter decisions: doc_id 'zz' is not in the dedup keys"):
        list(lib.exclusion_batches(keys, None, lib.Exclusions(), rejected=lib.Rejections.of(["zz"], ["language:fr"])))


def test_distinct_documents_without_words_are_not_exact_duplicates(tmp_path):
    # Issue 25 §2.4: all four normalise to "" (no letters or digits); only the raw copy (up to
    # whitespace) is a duplicate.
    texts = ["😀😀😀", "🎉🎉 🎊", "👍", "→ ⇒ ←", "  😀😀😀\n", "a real document with words in it"]
    paths = {"s": _write(tmp_path / "s.parquet", "s", texts)}
    table, stats = lib.dedup_keys_table(paths, {}, lib.DedupParams())
    r = {x["doc_id"]: x for x in table.to_pylist()}
    assert [r[f"s-0000{i}"]["reason"] for i in (1, 2, 3)] == [None] * 3, [r[f"s-0000{i}"] for i in range(4)]
    assert len({r[f"s-0000{i}"]["exact_key"] for i in range(4)}) == 4
    # the copy with more whitespace is the longer one: it survives (the keep rule prefers more characters)
    assert (r["s-00000"]["reason"], r["s-00004"]["reason"]) == ("exact_dup", None)
    assert r["s-00000"]["cluster_id"] == "s-00004" and r["s-00000"]["exact_key"] == r["s-00004"]["exact_key"]
    assert stats["no_shingle_documents"] == 5 and stats["wordless_exact_dup"] == 1
    assert lib.check_clusters(table) == []
    from mix_assets.stages.dedup import metadata as md
    from mix_assets.core.storage import Storage
    lib_storage = Storage(str(tmp_path))
    pq.write_table(table, tmp_path / "keys.parquet")
    meta = md.dedup_keys(lib_storage, "keys.parquet", stats, 1.0, ["s"])
    assert meta["wordless_docs"] == 5 and meta["wordless_exact_dup_docs"] == 1
