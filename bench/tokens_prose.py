"""The shared-prose token corpus bench/shards_audit.py builds on, and token_shards vs raw `encode_batch_fast` on it.

    .venv/bin/python bench/tokens_prose.py --sizes 50 200 --reps 3 --threads 2

(bench/tokens.py before issue 28, kept for shards_audit.py's corpus and spec; bench/tokens.py now measures the
encoder backends on a generated corpus.)

Corpus: the prose and GSM8K files of ../shared/data/sources cut into ~1.5-4 KB documents (paragraphs
> 6 KB cut at whitespace, like the perf-anchors corpus), repeated
with small seeded edits (2 % of words replaced per copy) until the target size; written as
raw/<source>/documents.parquet + dedup_keys + exclusion_masks + validation_split under bench/out/.
Tokenizer: 32k byte-level BPE trained with stages/tokens/tokenizer.py on a seeded 8 MB sample.
Each measurement runs in a fresh subprocess (RAYON_NUM_THREADS fixed before import; peak RSS =
VmHWM of that process); tools interleaved per repetition, medians reported.
  raw   = texts already in memory -> encode_batch_fast in batches of 1,000 docs (the physical limit)
  e2e   = stages/tokens/shards.build_token_shards: parquet read + encode + spill + budget fill + pack + sha256
          + atomic shard writes (exactly what the token_shards asset runs)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "tokens_prose"
sys.path.insert(0, str(REPO))
from mix_assets_tests.support.shared_data import find_shared_data  # noqa: E402

DATA = (find_shared_data() or REPO.parent / "shared" / "data") / "sources"


def _cut(p: str, limit: int = 6000) -> list[str]:
    """A paragraph longer than `limit` chars cut at whitespace (as the perf-anchors corpus does)."""
    out = []
    while len(p) > limit:
        i = p.rfind(" ", 0, limit)
        i = i if i > 0 else limit
        out.append(p[:i])
        p = p[i:].lstrip()
    return out + [p] if p else out


def _paragraph_docs(text: str, rng: random.Random) -> list[str]:
    paras = [c for p in text.replace("\r\n", "\n").split("\n\n") if p.strip() for c in _cut(p.strip())]
    docs, cur, target = [], [], rng.randint(1500, 4000)
    for p in paras:
        cur.append(p)
        if sum(len(x) for x in cur) >= target:
            docs.append("\n\n".join(cur))
            cur, target = [], rng.randint(1500, 4000)
    if cur:
        docs.append("\n\n".join(cur))
    return docs


def base_docs() -> dict[str, list[str]]:
    rng = random.Random(1234)
    prose = []
    for f in sorted(glob.glob(str(DATA / "*" / "*.txt"))) + sorted(glob.glob(str(DATA / "nltk_state_union" / "*"))):
        if f.endswith(".txt") or "nltk_state_union" in f:
            prose += _paragraph_docs(Path(f).read_bytes().decode("utf-8", errors="replace"), rng)
    math = []
    with open(DATA / "gsm8k" / "train.jsonl") as fh:
        for line in fh:
            r = json.loads(line)
            math.append(f"{r['question']}\n{r['answer']}")
    return {"prose": prose, "math": math}


def build_corpus(mb: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = OUT / f"corpus_{mb}mb_v2"
    if (root / "done").exists():
        return root
    from mix_assets.core import layout
    from mix_assets.stages.split.ranges import build_validation_split
    from mix_assets.core.storage import Storage

    base = base_docs()
    words = sorted({w for docs in base.values() for d in docs[:2000] for w in d.split()})
    rng = random.Random(99)
    target = mb * 1_000_000
    base_bytes = sum(len(d.encode()) for docs in base.values() for d in docs)
    reps = -(-target // base_bytes)
    st = Storage(str(root))
    keys = []
    total = 0
    for source, docs in base.items():
        rows = []
        for r in range(reps):
            for i, d in enumerate(docs):
                if r:
                    w = d.split(" ")
                    for _ in range(max(1, len(w) // 50)):
                        w[rng.randrange(len(w))] = rng.choice(words)
                    d = " ".join(w)
                doc_id = f"{source}-{r:02d}-{i:06d}"
                nb = len(d.encode())
                rows.append(dict(doc_id=doc_id, source=source, text=d, row_index=len(rows), origin=f"rep{r}:{i}",
                                 n_bytes=nb, n_chars=len(d), est_tokens=nb // 4))
                keys.append(dict(doc_id=doc_id, source=source, exact_key=f"{doc_id}", cluster_id=doc_id,
                                 cluster_size=1, keep=True, reason=None))
                total += nb
        # cut to the target size proportionally
        keep = int(len(rows) * min(1.0, target / (base_bytes * reps)))
        rows = rows[:keep]
        with st.writing(layout.RAW_DOCS.format(source=source)) as tmp:
            pq.write_table(pa.Table.from_pylist(rows), tmp, row_group_size=4096)
    kept_ids = set()
    for s in base:
        kept_ids |= set(pq.read_table(st.local_path(layout.RAW_DOCS.format(source=s)), columns=["doc_id"])
                        .column(0).to_pylist())
    keys = [k for k in keys if k["doc_id"] in kept_ids]
    with st.writing(layout.DEDUP_KEYS) as tmp:
        pq.write_table(pa.Table.from_pylist(keys), tmp)
    with st.writing(layout.EXCLUSION_MASKS) as tmp:
        pq.write_table(pa.table({"doc_id": pa.array([], pa.string())}), tmp)
    build_validation_split(st, sorted(base), seed=5, val_fraction=0.02)
    (root / "done").write_text("ok")
    return root


def tokenizer_file(corpus: Path) -> Path:
    p = OUT / "tok32k" / "tokenizer.json"
    if p.exists():
        return p
    from mix_assets.core import layout
    from mix_assets.stages.tokens.tokenizer import train_bpe, training_sample

    raw = {s: str(corpus / layout.RAW_DOCS.format(source=s)) for s in ("math", "prose")}
    texts = training_sample(str(corpus / layout.VALIDATION_SPLIT), raw, {"prose": 0.65, "math": 0.35}, 8_000_000, 5)
    train_bpe(texts, 32000, ["<|endoftext|>"], str(p.parent))
    return p


def spec_for(corpus: Path, tok: Path):
    """Budgets = 97 % of each source's train tokens (estimated from a sample), so nearly all is used.

    Built in the parent (it encodes a sample) and saved as bench_spec.json for the child."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from mix_assets.config import parse_spec
    from mix_assets.core import layout

    sp = pq.read_table(str(corpus / layout.VALIDATION_SPLIT))
    t = Tokenizer.from_file(str(tok))
    train_tokens = {}
    for s in ("math", "prose"):
        rows = sp.filter(pc.and_(pc.equal(sp["source"], s), pc.equal(sp["split"], "train")))
        nbytes = pc.sum(rows["n_bytes"]).as_py()
        pf = pq.ParquetFile(str(corpus / layout.RAW_DOCS.format(source=s)))
        sample = next(pf.iter_batches(batch_size=2000, columns=["text"])).column(0).to_pylist()
        bpt = sum(len(x.encode()) for x in sample) / sum(len(e.ids) for e in t.encode_batch_fast(sample))
        train_tokens[s] = nbytes / bpt
    n = int(0.97 * min(train_tokens[s] / (train_tokens[s] / sum(train_tokens.values())) for s in train_tokens))
    shares = {s: v / sum(train_tokens.values()) for s, v in train_tokens.items()}
    shares["prose"] = 1.0 - shares["math"]
    data = {
        "name": "bench",
        "target_tokens": n,
        "seed": 5,
        "sources": [{"name": s, "loader": {"kind": "parquet", "paths": ["x.parquet"]}, "text_field": "text",
                     "license": "bench", "rationale": "benchmark corpus built from shared data", "share": shares[s]}
                    for s in ("math", "prose")],
        "tokenizer": {"kind": "file", "path": str(tok)},
        "packing": {"seq_len": 2048, "encode_batch_docs": 1000},
        "split": {"val_fraction": 0.02},
        "storage": {"root": str(corpus)},
    }
    (corpus / "bench_spec.json").write_text(json.dumps(data))
    return parse_spec(data, str(corpus / "bench.yaml"))


def load_bench_spec(corpus: Path):
    from mix_assets.config import parse_spec

    return parse_spec(json.loads((corpus / "bench_spec.json").read_text()), str(corpus / "bench.yaml"))


def cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def vmrss_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def vmhwm_mb() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(tool: str, corpus: str, tok: str) -> None:
    import pyarrow.parquet as pq

    corpus_p = Path(corpus)
    if tool == "raw":
        from tokenizers import Tokenizer

        from mix_assets.core import layout

        t = Tokenizer.from_file(tok)
        texts = []
        for s in ("math", "prose"):
            texts += pq.read_table(str(corpus_p / layout.RAW_DOCS.format(source=s)), columns=["text"]).column(0).to_pylist()
        nbytes = sum(len(x.encode()) for x in texts)
        rss_before = vmrss_mb()
        c0 = cpu_s()
        t0 = time.perf_counter()
        ntok = 0
        for i in range(0, len(texts), 1000):
            ntok += sum(len(e.ids) for e in t.encode_batch_fast(texts[i : i + 1000], add_special_tokens=False))
        dt = time.perf_counter() - t0
        out = {"bytes": nbytes, "tokens": ntok, "secs": dt, "cpu": cpu_s() - c0, "rss_before_mb": rss_before}
    else:
        from mix_assets.stages.tokens.shards import build_token_shards
        from mix_assets.core.storage import Storage

        spec = load_bench_spec(corpus_p)
        st = Storage(str(corpus_p))
        out0 = {"rss_before_mb": vmrss_mb()}
        c0 = cpu_s()
        t0 = time.perf_counter()
        res = build_token_shards(st, spec, scratch_dir=str(corpus_p), token_cache=False)  # the encode, every rep
        dt = time.perf_counter() - t0
        out = {**out0, "cpu": cpu_s() - c0, "bytes": res.encoded_bytes, "tokens": res.encoded_tokens, "secs": dt,
               "emitted": res.splits["train"].emitted_tokens + res.splits["val"].emitted_tokens,
               "shards": len(res.splits["train"].shards) + len(res.splits["val"].shards)}
    out["peak_rss_mb"] = vmhwm_mb()
    print(json.dumps(out))


def run(tool: str, corpus: Path, tok: Path, threads: int) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads)}
    r = subprocess.run([sys.executable, __file__, "--child", tool, str(corpus), str(tok)], env=env,
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{tool} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def runs(rs: list[dict]) -> str:
    return ", ".join(f"{r['secs']:.1f}" for r in rs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tools", nargs="+", default=["raw", "e2e"], choices=["raw", "e2e"])
    ap.add_argument("--child", nargs=3)
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    corpora = {mb: build_corpus(mb) for mb in a.sizes}
    tok = tokenizer_file(corpora[a.sizes[0]])
    print(f"tokenizer: {tok} (32k byte-level BPE), threads={a.threads}, reps={a.reps} (median)")
    from mix_assets.core.storage import Storage
    from mix_assets.stages.tokens.tokenizer import build_tokenizer

    for corpus in corpora.values():  # the tokenizer asset's output: mix/tokenizer/ + identity
        build_tokenizer(Storage(str(corpus)), spec_for(corpus, tok))
    for mb, corpus in corpora.items():
        res = {t: [] for t in a.tools}
        for k in range(a.reps):
            order = a.tools if k % 2 == 0 else a.tools[::-1]
            for tool in order:
                res[tool].append(run(tool, corpus, tok, a.threads))
        first = res[a.tools[0]][0]
        print(f"\n## corpus {mb} MB ({first['bytes'] / 1e6:.1f} MB text encoded)")
        print("| tool | MB text | MB/s (wall) | tokens/s | CPU s per MB | peak RSS MB | RSS before MB | runs (s) "
              "| ratio to raw (wall) | ratio to raw (CPU) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        med: dict[str, tuple[float, float]] = {}
        for tool in a.tools:
            rs = res[tool]
            mbps = statistics.median(r["bytes"] / 1e6 / r["secs"] for r in rs)
            tps = statistics.median(r["tokens"] / r["secs"] for r in rs)
            cpm = statistics.median(r["cpu"] / (r["bytes"] / 1e6) for r in rs)
            med[tool] = (mbps, cpm)
            base = med.get("raw")
            ratio = f"{mbps / base[0]:.2f} | {base[1] / cpm:.2f}" if base else "— | —"
            print(f"| {tool} | {rs[0]['bytes'] / 1e6:.1f} | {mbps:.2f} | {tps / 1e3:.0f} k | {cpm:.2f} | "
                  f"{statistics.median(r['peak_rss_mb'] for r in rs):.0f} | "
                  f"{statistics.median(r['rss_before_mb'] for r in rs):.0f} | {runs(rs)} | {ratio} |")
        if "e2e" in res:
            e = res["e2e"][0]
            print(f"e2e wrote {e['shards']} shards, {e['emitted']:,} tokens emitted (train+val)")


if __name__ == "__main__":
    main()
