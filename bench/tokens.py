"""token_shards beside raw HF `encode_batch_fast` and raw fast-backend (tiktoken) encode of the same text, one run.

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/tokens.py --mb 100 --old cf598d0
    ... bench/tokens.py --mb 100 --tools ids raw-hf raw-fast e2e-fast --profile   # + where token_shards' time goes

Corpus: mix_assets_tests/support/gen_corpus.py (as bench/graph.py builds it: an order-2 word Markov chain over
the shared books, 10 % planted near-copies), spread over 4 sources, written as raw/<source>/documents.parquet +
dedup_keys + exclusion_masks + validation_split (2 % val) under bench/out/tokens/; budgets take 97 % of each
source's train tokens. Tokenizer: a 32k byte-level BPE trained with stages/tokens/tokenizer.train_bpe on a seeded
8 MB sample. Each tool runs in a fresh process (RAYON_NUM_THREADS=--threads), tools interleaved per repetition:
  ids        every document encoded by HF and by the fast backend: documents with identical ids, counted
  raw-hf     texts in memory -> encode_batch_fast, batches of 1,000 documents (HF's limit)
  raw-fast   texts in memory -> the fast backend's encode (backends.TiktokenEncoder), same batches and threads
  e2e-old    build_token_shards of `--old REV` (git archive): token_shards "now"
  e2e-hf     build_token_shards of this checkout, tokenizer.backend hf
  e2e-fast   build_token_shards of this checkout, tokenizer.backend fast
e2e = the token_shards asset's work without Dagster (parquet read, encode on the engine (local, --threads
workers), spill, budget fill, pack, sha256, shard writes, stream_docs); token cache off. Each e2e figure is MB of
text it encoded per second (it encodes only the documents its budgets need), beside raw MB/s over every document.
e2e-hf / e2e-fast then run token_ids_match_reference's comparison (exactness.check) on their shards, timed apart.
--profile: one more e2e-fast process, ONE thread (so the map tasks run where cProfile sees them), under cProfile,
its time grouped by phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "tokens"
SOURCES = ("part_a", "part_b", "part_c", "part_d")
TOOLS = ("ids", "raw-hf", "raw-fast", "e2e-old", "e2e-hf", "e2e-fast")


def _usage() -> dict:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": r.ru_utime + r.ru_stime, "wall": time.perf_counter()}


def _since(u0: dict) -> dict:
    u = _usage()
    with open("/proc/self/status") as f:
        peak = next(int(x.split()[1]) for x in f if x.startswith("VmHWM")) / 1024
    return {"secs": u["wall"] - u0["wall"], "cpu": u["cpu"] - u0["cpu"], "peak_rss_mb": peak}


def build_corpus(mb: int, seed: int = 7) -> Path:
    """raw/<source>/documents.parquet and the split inputs of a generated `mb` MB corpus (cached)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = OUT / f"gen_{mb}mb_s{seed}"
    if (root / "done").exists():
        return root
    sys.path.insert(0, str(REPO))
    from mix_assets.core import layout
    from mix_assets.core.storage import Storage
    from mix_assets.stages.split.ranges import build_validation_split
    from mix_assets_tests.support import gen_corpus as gc
    from mix_assets_tests.support.shared_data import find_shared_data

    data = find_shared_data()
    if data is None:
        raise SystemExit("the shared data folder (books for the Markov chain) is needed: set MIX_SHARED_DATA")
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    corpus = gc.generate_bytes(gc.MarkovModel.from_files(books, order=2), int(mb * 1e6), seed=seed)
    which = np.random.default_rng(seed).integers(0, len(SOURCES), len(corpus.texts))
    st = Storage(str(root))
    keys = []
    for k, s in enumerate(SOURCES):
        texts = [corpus.texts[i].strip() for i in np.flatnonzero(which == k)]
        ids = [f"{s}-{i:07d}" for i in range(len(texts))]
        nb = [len(t.encode()) for t in texts]
        t = pa.table({"doc_id": ids, "source": [s] * len(ids), "text": texts, "row_index": list(range(len(ids))),
                      "origin": ids, "n_bytes": nb, "n_chars": [len(x) for x in texts], "est_tokens": [n // 4 for n in nb]})
        with st.writing(layout.RAW_DOCS.format(source=s)) as tmp:
            pq.write_table(t, tmp, row_group_size=4096)
        keys += [dict(doc_id=d, source=s, exact_key=d, cluster_id=d, cluster_size=1, keep=True, reason=None) for d in ids]
    with st.writing(layout.DEDUP_KEYS) as tmp:
        pq.write_table(pa.Table.from_pylist(keys), tmp)
    with st.writing(layout.EXCLUSION_MASKS) as tmp:
        pq.write_table(pa.table({"doc_id": pa.array([], pa.string())}), tmp)
    build_validation_split(st, list(SOURCES), seed=5, val_fraction=0.02)
    (root / "done").write_text("ok")
    return root


def tokenizer_file(corpus: Path, vocab: int) -> Path:
    from mix_assets.core import layout
    from mix_assets.stages.tokens.tokenizer import train_bpe, training_sample

    p = corpus / f"tok{vocab}" / "tokenizer.json"
    if not p.exists():
        raw = {s: str(corpus / layout.RAW_DOCS.format(source=s)) for s in SOURCES}
        texts = training_sample(str(corpus / layout.VALIDATION_SPLIT), raw, {s: 1 / len(SOURCES) for s in SOURCES},
                                8_000_000, 5)
        train_bpe(texts, vocab, ["<|endoftext|>"], str(p.parent))
    return p


def write_spec(corpus: Path, tok: Path) -> None:
    """bench_spec.json: budgets = 97 % of each source's train tokens (estimated from 2,000 documents)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from mix_assets.core import layout

    sp = pq.read_table(str(corpus / layout.VALIDATION_SPLIT))
    t = Tokenizer.from_file(str(tok))
    train = {}
    for s in SOURCES:
        rows = sp.filter(pc.and_(pc.equal(sp["source"], s), pc.equal(sp["split"], "train")))
        sample = next(pq.ParquetFile(str(corpus / layout.RAW_DOCS.format(source=s))).iter_batches(
            batch_size=2000, columns=["text"])).column(0).to_pylist()
        bpt = sum(len(x.encode()) for x in sample) / sum(len(e.ids) for e in t.encode_batch_fast(sample))
        train[s] = pc.sum(rows["n_bytes"]).as_py() / bpt
    total = sum(train.values())
    shares = {s: round(v / total, 6) for s, v in train.items()}
    shares[SOURCES[-1]] = round(1 - sum(shares[s] for s in SOURCES[:-1]), 6)
    n = int(0.97 * min(train[s] / shares[s] for s in SOURCES))
    data = {"name": "bench", "target_tokens": n, "seed": 5,
            "sources": [{"name": s, "loader": {"kind": "parquet", "paths": ["x.parquet"]}, "text_field": "text",
                         "license": "generated", "rationale": "bench/tokens.py generated corpus", "share": shares[s]}
                        for s in SOURCES],
            "tokenizer": {"kind": "file", "path": str(tok)},
            "packing": {"seq_len": 2048, "separator": "<|endoftext|>", "shard_tokens": 1 << 22},
            "split": {"val_fraction": 0.02}, "storage": {"root": str(corpus)}}
    (corpus / "bench_spec.json").write_text(json.dumps(data))


def _texts(corpus: Path) -> list[str]:
    import pyarrow.parquet as pq

    from mix_assets.core import layout

    out = []
    for s in SOURCES:
        out += pq.read_table(str(corpus / layout.RAW_DOCS.format(source=s)), columns=["text"]).column(0).to_pylist()
    return out


def child(tool: str, corpus: Path, tok_path: Path, threads: int, profile: str | None) -> dict:
    from tokenizers import Tokenizer

    if tool.startswith("raw") or tool == "ids":
        from mix_assets.stages.tokens import backends

        tok = Tokenizer.from_file(str(tok_path))
        texts = _texts(corpus)
        nbytes = sum(len(x.encode()) for x in texts)
        hf, fast = backends.HFEncoder(tok), backends.encoder_for(tok, "fast")
        if tool == "ids":
            same = 0
            for i in range(0, len(texts), 1000):
                b = texts[i:i + 1000]
                same += sum(x == y for x, y in zip(hf.encode(b), fast.encode(b, threads)))
            return {"documents": len(texts), "identical": same, "bytes": nbytes}
        enc = hf if tool == "raw-hf" else fast
        u0 = _usage()
        ntok = 0
        for i in range(0, len(texts), 1000):
            ntok += sum(map(len, enc.encode(texts[i:i + 1000], threads)))
        return {**_since(u0), "bytes": nbytes, "tokens": ntok}
    from mix_assets.config import parse_spec
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage
    from mix_assets.stages.tokens.shards import build_token_shards

    data = json.loads((corpus / "bench_spec.json").read_text())
    if tool != "e2e-old":
        data["tokenizer"]["backend"] = tool.split("-")[1]
    spec = parse_spec(data, str(corpus / "bench.yaml"))
    with tempfile.TemporaryDirectory(prefix="bench-tokens-", dir=str(OUT)) as tmp:
        root = Path(tmp) / "storage"
        root.mkdir()
        for p in corpus.iterdir():  # the inputs, read in place (token_shards writes mix/ and tokens/)
            if p.is_dir() and p.name not in ("mix", "tokens", "lineage") and not p.name.startswith("tok"):
                os.symlink(p, root / p.name)
        st = Storage(str(root))
        from mix_assets.stages.tokens.tokenizer import build_tokenizer

        build_tokenizer(st, spec)
        eng = engine.Engine(num_cpus=threads)
        u0 = _usage()
        if profile:
            import cProfile

            prof = cProfile.Profile(time.process_time)  # CPU seconds: the host is shared
            prof.enable()
        res = build_token_shards(st, spec, scratch_dir=tmp, eng=eng, token_cache=False)
        if profile:
            prof.disable()
            prof.dump_stats(profile)
        got = _since(u0)
        if tool != "e2e-old" and not profile:  # token_ids_match_reference on these shards, timed apart
            from mix_assets.stages.tokens import exactness

            u1 = _usage()
            rep = exactness.check(st, spec.seed, Tokenizer.from_file(str(tok_path)))
            c = _since(u1)
            got |= {"check_secs": c["secs"], "check_cpu": c["cpu"], "check_sampled": sum(
                x.sampled for x in rep.sources.values()), "check_mismatches": rep.mismatches}
    return {**got, "bytes": res.encoded_bytes, "tokens": res.encoded_tokens,
            "backend": getattr(res, "backend", "hf (old)"), "reason": getattr(res, "backend_reason", "")}


def run(tool: str, corpus: Path, tok: Path, threads: int, old: Path | None, profile: str | None = None) -> dict:
    code = old if tool == "e2e-old" else REPO
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "PYTHONPATH": str(code)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", tool, str(corpus), str(tok), str(threads)]
    if profile:
        cmd += ["--profile-out", profile]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(code))
    if r.returncode:
        raise SystemExit(f"{tool} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


PHASES = [  # (phase, "file:function" whose cumulative CPU seconds it is; minus those of the phases it encloses)
    ("encode (backend calls, per-document ids into numpy)", ["backends.py:encode_flat"], []),
    ("encode_texts around them (batching, concatenation)", ["encoding.py:encode_texts"], ["backends.py:encode_flat"]),
    ("raw Parquet read of the encoded rows", ["engine.py:read_rows"], []),
    ("texts to Python str (to_pylist)", ["~:<method 'to_pylist' of 'pyarrow.lib.ChunkedArray' objects>",
                                          "~:<method 'to_pylist' of 'pyarrow.lib.Array' objects>"], []),
    ("spill appends (reduce)", ["shards.py:append"], []),
    ("selection order (seeded hash per document)", ["shards.py:_selection_order"], []),
    ("budget fill", ["packing.py:fill_budget"], []),
    ("pack: order keys, spill reads, packer", ["shards.py:_pack"], ["shards.py:shard", "shards.py:doc_index",
                                                                   "shards.py:_write_stream_docs"]),
    ("shard + doc index writes with sha256", ["shards.py:shard", "shards.py:doc_index"], []),
    ("stream_docs", ["shards.py:_write_stream_docs"], []),
]


def profile_table(path: str, total: float) -> str:
    """Cumulative CPU seconds (cProfile with process_time) of token_shards' phases, and the rest."""
    import pstats

    st = pstats.Stats(path)
    cum: dict[str, float] = {}
    for (file, _, fn), (_, _, _, ct, _) in st.stats.items():
        key = f"{Path(file).name}:{fn}"
        cum[key] = cum.get(key, 0.0) + ct
    lines = ["| phase | CPU s | share of token_shards CPU |", "|---|---|---|"]
    seen = 0.0
    for name, fns, minus in PHASES:
        x = sum(cum.get(f, 0.0) for f in fns) - sum(cum.get(f, 0.0) for f in minus)
        seen += x
        lines.append(f"| {name} | {x:.2f} | {x / total:.1%} |")
    lines.append(f"| the rest (split read, bookkeeping, imports of the step) | {total - seen:.2f} | {(total - seen) / total:.1%} |")
    top = sorted(((ct, f"{Path(file).name}:{fn}") for (file, _, fn), (_, _, _, ct, _) in st.stats.items()
                  if "mix_assets" in file), reverse=True)[:15]
    lines += ["", "Top project functions by cumulative CPU seconds:", ""]
    lines += [f"- {name}: {ct:.2f} s" for ct, name in top]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--old", default=None, help="a git revision: its token_shards as e2e-old")
    ap.add_argument("--tools", nargs="+", default=None, choices=TOOLS)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--child", nargs=4)
    ap.add_argument("--profile-out")
    a = ap.parse_args()
    if a.child:
        tool, corpus, tok, threads = a.child
        print(json.dumps(child(tool, Path(corpus), Path(tok), int(threads), a.profile_out)))
        return
    sys.path.insert(0, str(REPO))
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(a.mb)
    tok = tokenizer_file(corpus, a.vocab)
    if not (corpus / "bench_spec.json").exists():
        write_spec(corpus, tok)
    tools = a.tools or [t for t in TOOLS if t != "e2e-old" or a.old]
    old = None
    if "e2e-old" in tools:
        from lsh_reduce import old_code  # the same git archive export

        old = old_code(a.old, OUT / "old")
    print(f"# bench/tokens.py --mb {a.mb}: {corpus.name}, {a.vocab // 1000}k byte-level BPE, threads={a.threads}, "
          f"reps={a.reps} (median); load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    res: dict[str, list[dict]] = {t: [] for t in tools}
    for k in range(a.reps):
        order = tools if k % 2 == 0 else tools[::-1]
        for t in order:
            if t == "ids" and res["ids"]:
                continue
            res[t].append(run(t, corpus, tok, a.threads, old))
            print(f"  {t}: {json.dumps(res[t][-1])}", flush=True)
    if "ids" in res:
        r = res["ids"][0]
        print(f"\nids identical (HF vs fast backend): {r['identical']:,} of {r['documents']:,} documents "
              f"({r['bytes'] / 1e6:.1f} MB)")
    med = {t: (statistics.median(x["bytes"] / 1e6 / x["secs"] for x in rs),
               statistics.median(x["cpu"] / (x["bytes"] / 1e6) for x in rs),
               statistics.median(x["secs"] for x in rs), rs[0]) for t, rs in res.items() if t != "ids"}
    print("\n| tool | MB encoded | MB/s (wall) | CPU s / MB | wall s | peak RSS MB | backend | vs raw-hf (wall / CPU) "
          "| vs raw-fast (wall / CPU) | vs e2e-old (wall / CPU) |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def ratio(t: str, base: str) -> str:
        if base not in med or t == base:
            return "—"
        return f"{med[t][0] / med[base][0]:.2f} / {med[base][1] / med[t][1]:.2f}"

    for t, (mbps, cpm, secs, first) in med.items():
        print(f"| {t} | {first['bytes'] / 1e6:.1f} | {mbps:.2f} | {cpm:.3f} | {secs:.1f} | {first['peak_rss_mb']:.0f} | "
              f"{first.get('backend', 'hf' if t == 'raw-hf' else 'tiktoken')} | {ratio(t, 'raw-hf')} | "
              f"{ratio(t, 'raw-fast')} | {ratio(t, 'e2e-old')} |")
    for t in ("e2e-hf", "e2e-fast"):
        if t in res and "check_secs" in res[t][0]:
            c = res[t][0]
            print(f"\ntoken_ids_match_reference on the {t} shards: {c['check_sampled']:,} documents sampled, "
                  f"{c['check_mismatches']} mismatched, {c['check_secs']:.1f} s wall, {c['check_cpu']:.1f} CPU s "
                  f"({c['check_cpu'] / c['cpu']:.2f} of that token_shards' CPU)")
    if a.profile:
        prof = str(OUT / "e2e-fast.prof")
        # one engine thread: the map tasks run on the main thread, so cProfile sees the encode and the reads too
        r = run("e2e-fast", corpus, tok, 1, old, profile=prof)
        print(f"\n## where token_shards' time goes (e2e-fast, one thread, under cProfile: {r['secs']:.1f} s wall, "
              f"{r['cpu']:.1f} CPU s)\n")
        print(profile_table(prof, r["cpu"]))


if __name__ == "__main__":
    main()
