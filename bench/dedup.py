"""Benchmark: MinHash signatures and LSH clustering vs the peers, measured in the same run.

    .venv/bin/python bench/dedup.py [--reps 3] [--replicas 20] [--data ../shared/data]

Corpus (built in memory from `<data>/sources`, seed 1234, as perf-anchors.md §2 describes):
Gutenberg headers/footers stripped, hard-wrapped lines joined, paragraphs grouped into documents
of a random 1.5-4 KB target (paragraphs > 6 KB cut at whitespace); GSM8K rows are paragraphs
("question\\nanswer"). The shared sources hold ~11 MB of text, so to reach >= 20 MB a second set of
documents is made from the same paragraphs with each paragraph's word order reversed (real
vocabulary and word lengths, new shingles, no duplicates of the first set). Then ~10 % near
duplicates: 0.2-2 % of words deleted/inserted/replaced, 30 % also lose a 1-7 % tail; shuffled.

Every tool runs in a fresh subprocess (peak RSS is per tool); tools are interleaved over `reps`
rounds (round k rotates the tool list by k) and the median time is reported with every run time.
Peak memory of a timed section = VmHWM after it - RSS before it (VmHWM reset with
/proc/self/clear_refs), per document.

Signatures: docs in memory -> normalise + shingle + hash + 128-perm signature (ours also computes
the exact sha256 key). Peers: rensa CMinHash / RMinHash per doc and datasketch update_batch /
bulk with the perf-anchors Python shingling (str.translate + split, 5-gram string set);
datasketch update() per shingle on the first 1,500 docs.

Clustering: the corpus' signatures replicated `replicas` times through a per-replica bijection of
the 32-bit values (x -> a*x + c mod 2^32, odd a): equalities inside a replica (hence the
near-duplicate structure and every Jaccard estimate) are kept, replicas do not collide. Ours =
`lsh.dedup` (doc_id sort, exact groups, band sort, candidate confirmation, components, keep rule);
peer = datasketch MinHashLSH with the same (b, r): per doc query then insert + Python union-find
(MinHash objects built before the timer, as in perf-anchors).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import string
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SEED = 1234


def shared_data() -> Path:
    """The shared data folder, found as the tests find it (mix_assets_tests/support/shared_data.py)."""
    from mix_assets_tests.support.shared_data import find_shared_data

    return find_shared_data() or REPO.parent / "shared" / "data"
NUM_PERM, SHINGLE, THRESHOLD = 128, 5, 0.8
FP_W, FN_W = 0.05, 0.95
SUBSAMPLE = 1500


# -- corpus --------------------------------------------------------------------------------------
def _read(p: Path) -> str:
    raw = p.read_bytes()
    try:
        t = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        t = raw.decode("latin-1")
    t = t.replace("\r\n", "\n").replace("\r", "\n")
    m = re.search(r"\*\*\* ?START OF[^\n]*\n", t)
    if m:
        t = t[m.end() :]
    m = re.search(r"\n[^\n]*\*\*\* ?END OF", t)
    if m:
        t = t[: m.start()]
    return t


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in re.split(r"\n\s*\n", text):
        p = " ".join(line.strip() for line in block.split("\n") if line.strip())
        while len(p) > 6000:
            cut = p.rfind(" ", 0, 6000)
            cut = cut if cut > 0 else 6000
            out.append(p[:cut])
            p = p[cut:].strip()
        if p:
            out.append(p)
    return out


def _group(paras: list[str], rng: random.Random) -> list[str]:
    docs, cur, target = [], [], rng.uniform(1500, 4000)
    size = 0
    for p in paras:
        cur.append(p)
        size += len(p) + 2
        if size >= target:
            docs.append("\n\n".join(cur))
            cur, size, target = [], 0, rng.uniform(1500, 4000)
    if cur:
        docs.append("\n\n".join(cur))
    return docs


def _edit(doc: str, rng: random.Random) -> str:
    words = doc.split(" ")
    k = max(1, int(len(words) * rng.uniform(0.002, 0.02)))
    for _ in range(k):
        i = rng.randrange(len(words))
        op = rng.random()
        if op < 1 / 3 and len(words) > 1:
            del words[i]
        elif op < 2 / 3:
            words.insert(i, rng.choice(words))
        else:
            words[i] = rng.choice(words)
    if rng.random() < 0.3:
        words = words[: int(len(words) * (1 - rng.uniform(0.01, 0.07)))]
    return " ".join(words)


def build_corpus(data: Path) -> tuple[list[str], list[str], list[int]]:
    """(doc_ids, texts, dup_of index or -1), deterministic for a given data folder."""
    rng = random.Random(SEED)
    src = data / "sources"
    paras: list[str] = []
    for p in sorted(src.rglob("*.txt")):
        if p.name == "README":
            continue
        paras += _paragraphs(_read(p))
    with open(src / "gsm8k" / "train.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            paras.append(f"{row['question']}\n{row['answer']}")
    docs = _group(paras, rng)
    docs += _group([" ".join(reversed(p.split(" "))) for p in paras], rng)
    n0 = len(docs)
    dup_of = [-1] * n0
    for i in sorted(rng.sample(range(n0), n0 // 10)):
        docs.append(_edit(docs[i], rng))
        dup_of.append(i)
    order = list(range(len(docs)))
    rng.shuffle(order)
    texts = [docs[i] for i in order]
    new_index = {old: new for new, old in enumerate(order)}
    dups = [new_index[dup_of[i]] if dup_of[i] >= 0 else -1 for i in order]
    ids = [f"bench-{i:06d}" for i in range(len(texts))]
    return ids, texts, dups


# -- measurement helpers ---------------------------------------------------------------------------
def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


class Section:
    """Times a section and records its peak memory above the RSS at its start."""

    def __enter__(self):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        self.rss0 = _status("VmRSS:")
        self.cpu0 = time.process_time()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.t0
        self.cpu = time.process_time() - self.cpu0
        self.peak_extra = _status("VmHWM:") - self.rss0


_TRANS = str.maketrans({c: " " for c in string.punctuation})


def _py_shingles(text: str) -> set[str]:
    w = text.lower().translate(_TRANS).split()
    if len(w) < SHINGLE:
        return {" ".join(w)} if w else set()
    return {" ".join(w[i : i + SHINGLE]) for i in range(len(w) - SHINGLE + 1)}


# -- tools ------------------------------------------------------------------------------------------
def sig_tool(name: str, texts: list[str]) -> dict:
    from mix_assets.stages.dedup import minhash as mh

    if name.startswith("ours"):
        threads = 2 if name.endswith("T2") else 1
        import pyarrow as pa

        arr = pa.array(texts, pa.large_string())
        with Section() as s:
            mh.sign_texts(arr, NUM_PERM, SHINGLE, threads=threads)
    elif name.startswith("rensa"):
        import rensa

        cls = rensa.CMinHash if name == "rensa_CMinHash" else rensa.RMinHash
        with Section() as s:
            for t in texts:
                m = cls(num_perm=NUM_PERM, seed=1)
                m.update(list(_py_shingles(t)))
                m.digest()
    elif name == "datasketch_update_batch":
        from datasketch import MinHash

        with Section() as s:
            for t in texts:
                m = MinHash(num_perm=NUM_PERM, seed=1)
                m.update_batch([x.encode("utf-8") for x in _py_shingles(t)])
    elif name == "datasketch_bulk":
        from datasketch import MinHash

        with Section() as s:
            for i in range(0, len(texts), 1000):
                MinHash.bulk(
                    [[x.encode("utf-8") for x in _py_shingles(t)] for t in texts[i : i + 1000]],
                    num_perm=NUM_PERM,
                    seed=1,
                )
    elif name == "datasketch_update":
        from datasketch import MinHash

        texts = texts[:SUBSAMPLE]
        with Section() as s:
            for t in texts:
                m = MinHash(num_perm=NUM_PERM, seed=1)
                for x in _py_shingles(t):
                    m.update(x.encode("utf-8"))
    else:
        raise SystemExit(f"unknown tool {name}")
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return {"docs": len(texts), "mb": mb, "seconds": s.seconds, "cpu": s.cpu, "peak_extra": s.peak_extra}


def _replicated(sig: np.ndarray, keys: list[str], replicas: int):
    rng = np.random.default_rng(SEED)
    sigs, all_keys = [], []
    for k in range(replicas):
        a = np.uint32(rng.integers(0, 1 << 31) * 2 + 1)
        c = np.uint32(rng.integers(0, 1 << 32))
        with np.errstate(over="ignore"):
            sigs.append(sig * a + c if k else sig.copy())
        all_keys += [f"{k:02x}{x[2:]}" for x in keys]  # still 64 hex chars, distinct per replica
    return np.concatenate(sigs), all_keys


def cluster_tool(name: str, sig_file: str, replicas: int) -> dict:
    from mix_assets.stages.dedup import lsh

    z = np.load(sig_file, allow_pickle=False)
    sig, keys = _replicated(z["sig"], z["keys"].tolist(), replicas)
    n = len(sig)
    n_shingles = np.tile(z["n_shingles"], replicas)
    n_chars = np.tile(z["n_chars"], replicas)
    dup_of = z["dup_of"]
    b, r = lsh.optimal_params(THRESHOLD, NUM_PERM, FP_W, FN_W)
    ids = [f"r{k:02d}-{i:06d}" for k in range(replicas) for i in range(len(z["sig"]))]
    base = len(z["sig"])
    if name == "ours":
        import pyarrow as pa

        ids_arr = pa.array(ids, pa.string())
        prio = np.zeros(n, np.int64)
        with Section() as s:
            res = lsh.dedup(ids_arr, keys, sig, n_shingles, n_chars, prio, b, r, THRESHOLD)
        same = res.kept_index
    elif name == "datasketch_MinHashLSH":
        from datasketch import MinHash, MinHashLSH

        mhs = [MinHash(num_perm=NUM_PERM, hashvalues=row, scheme="affine32") for row in sig]
        with Section() as s:
            index = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM, weights=(FP_W, FN_W))
            parent = list(range(n))

            def find(x):
                while parent[x] != x:
                    parent[x] = parent[parent[x]]
                    x = parent[x]
                return x

            for i, m in enumerate(mhs):
                for j in index.query(m):
                    ri, rj = find(i), find(j)
                    if ri != rj:
                        parent[max(ri, rj)] = min(ri, rj)
                index.insert(i, m)
            same = np.array([find(i) for i in range(n)])
        assert (index.b, index.r) == (b, r), (index.b, index.r)
    else:
        raise SystemExit(f"unknown tool {name}")
    pairs = [(k * base + i, k * base + d) for k in range(replicas) for i, d in enumerate(dup_of) if d >= 0]
    recall = float(np.mean([same[i] == same[j] for i, j in pairs]))
    removed = int(n - len(np.unique(same)))
    return {
        "docs": n,
        "seconds": s.seconds,
        "cpu": s.cpu,
        "peak_extra": s.peak_extra,
        "recall": recall,
        "removed": removed,
        "b": b,
        "r": r,
    }


# -- driver -----------------------------------------------------------------------------------------
SIG_TOOLS = [
    "ours_T2",
    "ours_T1",
    "rensa_CMinHash",
    "rensa_RMinHash",
    "datasketch_update_batch",
    "datasketch_bulk",
    "datasketch_update",
]
CLUSTER_TOOLS = ["ours", "datasketch_MinHashLSH"]


def _child(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True, env={**os.environ}
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rows(results: dict[str, list[dict]], kind: str) -> list[dict]:
    rows = []
    for name, runs in results.items():
        secs = [r["seconds"] for r in runs]
        med = statistics.median(secs)
        r0 = runs[0]
        row = {
            "tool": name,
            "docs": r0["docs"],
            "docs_s": r0["docs"] / med,
            "peak_b_doc": statistics.median(r["peak_extra"] for r in runs) / r0["docs"],
            "cpu_s": statistics.median(r["cpu"] for r in runs),
            "runs": secs,
        }
        if kind == "sig":
            row["mb_s"] = r0["mb"] / med
        else:
            row.update(recall=r0["recall"], removed=r0["removed"], b=r0["b"], r=r0["r"])
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(shared_data()))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=20)
    ap.add_argument("--work", default="/tmp/mix_assets_bench_dedup")
    ap.add_argument("--skip-peers", action="store_true", help="only our tools (quick check)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    work = Path(a.work)

    if a.child:
        kind, name = a.child[0], a.child[1]
        if kind == "sig":
            texts = json.loads((work / "corpus.json").read_text())["texts"]
            print(json.dumps(sig_tool(name, texts)))
        else:
            print(json.dumps(cluster_tool(name, str(work / "sig.npz"), int(a.child[2]))))
        return

    from mix_assets.stages.dedup import lsh
    from mix_assets.stages.dedup import minhash as mh

    work.mkdir(parents=True, exist_ok=True)
    ids, texts, dup_of = build_corpus(Path(a.data))
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    sizes = np.array([len(t.encode("utf-8")) for t in texts])
    print(
        f"corpus: {len(texts):,} docs, {mb:.2f} MB, doc size p10/p50/p90 = "
        f"{np.percentile(sizes, 10) / 1e3:.1f}/{np.percentile(sizes, 50) / 1e3:.1f}/"
        f"{np.percentile(sizes, 90) / 1e3:.1f} KB, planted near-dups {sum(d >= 0 for d in dup_of):,}"
    )
    (work / "corpus.json").write_text(json.dumps({"texts": texts}))
    batch = mh.sign_texts(texts, NUM_PERM, SHINGLE)
    n_chars = np.array([len(t) for t in texts])
    np.savez(
        work / "sig.npz",
        sig=batch.signatures,
        keys=np.array(batch.exact_keys),
        n_shingles=batch.n_shingles,
        n_chars=n_chars,
        dup_of=np.array(dup_of),
    )
    # Estimate quality on the planted pairs: exact shingle Jaccard vs estimate.
    from mix_assets.core import textkeys as tk

    pairs = [(i, d) for i, d in enumerate(dup_of) if d >= 0]
    wl = tk.words(texts)
    h, off = tk.word_hashes(wl)
    sh, soff = tk.ngram_hashes(h, off, SHINGLE)
    exact = np.array(
        [
            len(set(sh[soff[i] : soff[i + 1]]) & set(sh[soff[j] : soff[j + 1]]))
            / len(set(sh[soff[i] : soff[i + 1]]) | set(sh[soff[j] : soff[j + 1]]))
            for i, j in pairs
        ]
    )
    est = mh.jaccard_estimate(batch.signatures[[i for i, _ in pairs]], batch.signatures[[j for _, j in pairs]])
    b, r = lsh.optimal_params(THRESHOLD, NUM_PERM, FP_W, FN_W)
    print(
        f"planted pairs: exact shingle Jaccard p5/p50/min = {np.percentile(exact, 5):.3f}/"
        f"{np.median(exact):.3f}/{exact.min():.3f}, {np.mean(exact < THRESHOLD):.1%} below {THRESHOLD}; "
        f"estimate MAE = {np.mean(np.abs(est - exact)):.4f}; b={b} r={r}, S-curve 0.5/0.7/0.8/0.9 = "
        + "/".join(f"{lsh.s_curve(b, r, j):.3f}" for j in (0.5, 0.7, 0.8, 0.9))
    )

    sig_tools = SIG_TOOLS[:2] if a.skip_peers else SIG_TOOLS
    cl_tools = CLUSTER_TOOLS[:1] if a.skip_peers else CLUSTER_TOOLS
    sig_res: dict[str, list[dict]] = {t: [] for t in sig_tools}
    cl_res: dict[str, list[dict]] = {t: [] for t in cl_tools}
    for k in range(a.reps):
        for t in sig_tools[k % len(sig_tools) :] + sig_tools[: k % len(sig_tools)]:
            sig_res[t].append(_child(["--work", str(work), "--child", "sig", t]))
            print(f"  rep {k} sig {t}: {sig_res[t][-1]['seconds']:.2f} s", file=sys.stderr)
        for t in cl_tools[k % len(cl_tools) :] + cl_tools[: k % len(cl_tools)]:
            cl_res[t].append(_child(["--work", str(work), "--child", "cluster", t, str(a.replicas)]))
            print(f"  rep {k} cluster {t}: {cl_res[t][-1]['seconds']:.2f} s", file=sys.stderr)

    srows = _rows(sig_res, "sig")
    rensa_t1 = max((r["mb_s"] for r in srows if r["tool"].startswith("rensa")), default=float("nan"))
    print(f"\n## Signatures ({NUM_PERM} perms, {SHINGLE}-word shingles), median of {a.reps}, interleaved")
    print("| tool | docs | docs/s | MB/s | peak extra B/doc | CPU s | runs (s) | ratio to best rensa |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(srows, key=lambda x: -x["mb_s"]):
        print(
            f"| {r['tool']} | {r['docs']:,} | {r['docs_s']:,.0f} | {r['mb_s']:.2f} | {r['peak_b_doc']:,.0f} | "
            f"{r['cpu_s']:.1f} | {', '.join(f'{x:.2f}' for x in r['runs'])} | {r['mb_s'] / rensa_t1:.2f} |"
        )
    crows = _rows(cl_res, "cluster")
    peer = next((r["docs_s"] for r in crows if r["tool"] == "datasketch_MinHashLSH"), float("nan"))
    print(f"\n## Clustering ({a.replicas} replicas), median of {a.reps}, interleaved")
    print("| tool | docs | b×r | docs/s | index B/doc | pair recall | docs removed | runs (s) | ratio to MinHashLSH |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(crows, key=lambda x: -x["docs_s"]):
        print(
            f"| {r['tool']} | {r['docs']:,} | {r['b']}×{r['r']} | {r['docs_s']:,.0f} | {r['peak_b_doc']:,.0f} | "
            f"{r['recall']:.3f} | {r['removed']:,} | {', '.join(f'{x:.2f}' for x in r['runs'])} | "
            f"{r['docs_s'] / peer:.1f} |"
        )


if __name__ == "__main__":
    main()
