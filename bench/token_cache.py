"""Benchmark: token_shards with the token-id cache (stages/tokens/idcache.py) empty, full, and after 2 % new
documents in one source; each build in a fresh process, outputs compared byte for byte (issue 27, item 4).

    PYTHONPATH=. /work/main/.venv/bin/python bench/token_cache.py --run /tmp/tok27/graph/100mb/local-2-in_process-r1

`--run`: a finished bench/graph.py run folder (mix.yaml, storage/ with raw/, dedup/, masks/, split/ and
mix/tokenizer/); its inputs are copied into a temporary storage root (not timed). Builds, in this order
(engine local x `--cpus`, RAYON_NUM_THREADS=2 as bench/graph.py), `--repeats` times each:
  empty  = the cache folder deleted first: every needed document encoded and stored
  full   = the same inputs again: every document read from the cache
Then `--new-share` (2 %) new documents are appended to `--source` (default: the largest source): each is an
existing document of that source with its two halves swapped at a word boundary (new text, the source's
word statistics), added to dedup_keys as its own kept cluster, and validation_split rebuilt (not timed):
  appended = the cache as `full` left it (restored before each repeat): only the new documents encoded
  nocache  = the same changed inputs, token_cache=False (what a build encodes without the cache)
Per build: wall and CPU seconds (user + system of the process), peak RSS (VmHWM), documents from the cache /
encoded, MB encoded. Checked: the shards, doc index, stream docs and shard_stats.json of `empty` equal
`full`'s, and `appended`'s equal `nocache`'s. Sizes: the cache folder, the token shards (train + val) and
the raw text, in bytes on disk.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _usage() -> dict:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": r.ru_utime, "sys": r.ru_stime, "wall": time.monotonic()}


def measure(root: Path, cfg: Path, cpus: int, cache: bool) -> dict:
    """In this process: build_token_shards on the storage root `root`."""
    from mix_assets.config import load_spec
    from mix_assets.core import engine, layout
    from mix_assets.core.storage import Storage
    from mix_assets.stages.tokens.shards import build_token_shards

    spec = load_spec(cfg)
    storage = Storage(str(root))
    u0 = _usage()
    res = build_token_shards(storage, spec, scratch_dir=str(root.parent), eng=engine.Engine(num_cpus=cpus),
                             token_cache=cache)
    u1 = _usage()
    with open("/proc/self/status") as f:
        peak = next(int(x.split()[1]) for x in f if x.startswith("VmHWM")) / 1024
    files = sorted(p for p in (root / layout.MIX_DIR).rglob("*") if p.is_file() and "tokenizer" not in p.parts)
    files += sorted((root / "tokens" / "stream_docs").glob("*.parquet")) + [root / layout.SHARD_STATS]
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(root)).encode() + hashlib.sha256(p.read_bytes()).digest())
    hit, miss = (sum(v[i] for v in res.cache_docs.values()) for i in (0, 1))
    return {"wall": u1["wall"] - u0["wall"], "cpu": u1["user"] + u1["sys"] - u0["user"] - u0["sys"],
            "peak_rss_mb": peak, "cached": hit, "encoded": miss, "mb": res.encoded_bytes / 1e6,
            "per_source": res.cache_docs, "digest": digest.hexdigest(),
            "shard_bytes": sum(p.stat().st_size for p in (root / layout.MIX_DIR).glob("*/*.bin"))}


def _du(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


def append_new(root: Path, cfg: Path, source: str | None, share: float, seed: int = 7) -> tuple[str, int]:
    """Append `share` x (documents of `source`) new documents to raw/<source>, keep them in dedup_keys,
    rebuild validation_split. Returns (source, documents added)."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from mix_assets.config import load_spec
    from mix_assets.core import layout
    from mix_assets.core.storage import Storage
    from mix_assets.stages.split.ranges import build_validation_split

    spec = load_spec(cfg)
    names = [s.name for s in spec.sources]
    if source is None:
        source = max(names, key=lambda s: (root / layout.RAW_DOCS.format(source=s)).stat().st_size)
    path = root / layout.RAW_DOCS.format(source=source)
    raw = pq.read_table(path)
    n = raw.num_rows
    k = max(1, round(n * share))
    rng = random.Random(seed)
    picks = rng.sample(range(n), k)
    base = raw.take(pa.array(picks)).to_pylist()
    rows = []
    for j, r in enumerate(base):
        words = r["text"].split(" ")
        cut = max(1, len(words) // 2)
        text = " ".join(words[cut:] + words[:cut])
        rows.append({**r, "doc_id": f"{source}-new{j:06d}", "text": text, "row_index": n + j,
                     "origin": f"bench:new{j}", "n_bytes": len(text.encode()), "n_chars": len(text)})
    pq.write_table(pa.concat_tables([raw, pa.Table.from_pylist(rows, schema=raw.schema)]), path)
    keys_path = root / layout.DEDUP_KEYS
    keys = pq.read_table(keys_path)
    new = []
    for r in rows:
        row = {c: None for c in keys.column_names}
        row.update(doc_id=r["doc_id"], source=source, exact_key=hashlib.sha256(r["text"].encode()).hexdigest(),
                   cluster_id=r["doc_id"], cluster_size=1, keep=True, reason=None, n_words=len(r["text"].split()))
        new.append(row)
    keys = pa.concat_tables([keys, pa.Table.from_pylist(new, schema=keys.schema)]).sort_by("doc_id")
    pq.write_table(keys, keys_path)
    build_validation_split(Storage(str(root)), names, spec.seed, spec.split.val_fraction)
    return source, k


def _child(root: Path, cfg: Path, cpus: int, cache: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), RAYON_NUM_THREADS="2")
    args = [sys.executable, __file__, "--child", str(root), str(cfg), str(cpus), "1" if cache else "0"]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a bench/graph.py run folder (mix.yaml, storage/)")
    ap.add_argument("--cpus", type=int, default=2, help="in-process engine threads")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--source", default=None, help="the source that gets new documents (default: the largest)")
    ap.add_argument("--new-share", type=float, default=0.02)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        root, cfg, cpus, cache = a.child
        print(json.dumps(measure(Path(root), Path(cfg), int(cpus), cache == "1")))
        return
    from mix_assets.core import layout

    cfg = a.run / "mix.yaml"
    with tempfile.TemporaryDirectory(prefix="bench-token-cache-") as tmp:
        root = Path(tmp) / "storage"
        for part in ("raw", "dedup", "masks", "split", "mix/tokenizer"):
            shutil.copytree(a.run / "storage" / part, root / part)
        cache_dir, saved = root / layout.TOKEN_CACHE_DIR, Path(tmp) / "cache-after-full"
        print(f"{a.run}: token_shards, engine local x{a.cpus}, RAYON_NUM_THREADS=2, fresh process per build")
        print("| build | repeat | wall s | CPU s | peak RSS MB | documents from the cache | documents encoded | MB encoded | outputs |")
        print("|---|---|---|---|---|---|---|---|---|")
        runs: dict[str, list] = {}

        def run(name: str, r: int, cache: bool = True) -> dict:
            g = _child(root, cfg, a.cpus, cache)
            runs.setdefault(name, []).append(g)
            print(f"| {name} | {r + 1} | {g['wall']:.1f} | {g['cpu']:.1f} | {g['peak_rss_mb']:.0f} | {g['cached']:,} | "
                  f"{g['encoded']:,} | {g['mb']:.1f} | {g['digest'][:12]} |", flush=True)
            return g

        for r in range(a.repeats):
            shutil.rmtree(cache_dir, ignore_errors=True)
            run("empty", r)
            run("full", r)
        shutil.copytree(cache_dir, saved)
        cache_bytes, shard_bytes = _du(cache_dir), runs["full"][-1]["shard_bytes"]
        raw_bytes = sum(_du(root / "raw" / s.name) for s in __import__("mix_assets.config", fromlist=["load_spec"])
                        .load_spec(cfg).sources)
        source, k = append_new(root, cfg, a.source, a.new_share)
        for r in range(a.repeats):
            shutil.rmtree(cache_dir, ignore_errors=True)
            shutil.copytree(saved, cache_dir)
            run("appended", r)
            run("nocache", r, cache=False)
        med = {n: sorted(g["cpu"] for g in gs)[len(gs) // 2] for n, gs in runs.items()}
        wall = {n: sorted(g["wall"] for g in gs)[len(gs) // 2] for n, gs in runs.items()}
        print(f"\nappended: {k:,} new documents to source {source} ({a.new_share:.0%} of its documents); "
              f"per source (cached, encoded) in the last appended build: {runs['appended'][-1]['per_source']}")
        print(f"median-of-{a.repeats} (upper) CPU s: " + ", ".join(f"{n} {v:.1f}" for n, v in med.items())
              + "; wall s: " + ", ".join(f"{n} {v:.1f}" for n, v in wall.items()))
        print(f"full / empty CPU {med['full'] / med['empty']:.3f}, wall {wall['full'] / wall['empty']:.3f}; "
              f"appended / nocache CPU {med['appended'] / med['nocache']:.3f}, wall {wall['appended'] / wall['nocache']:.3f}")
        print(f"bytes on disk: token-id cache {cache_bytes:,} (after the first builds), token shards (train + val) "
              f"{shard_bytes:,} (cache / shards {cache_bytes / shard_bytes:.2f}), raw documents {raw_bytes:,}")
        same_a = len({g["digest"] for n in ("empty", "full") for g in runs[n]}) == 1
        same_b = len({g["digest"] for n in ("appended", "nocache") for g in runs[n]}) == 1
        print(f"same outputs empty = full: {same_a}; appended = nocache: {same_b}")
        if not (same_a and same_b):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
