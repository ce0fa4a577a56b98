"""Benchmark: the shared text kernels (core/textkeys.py, stages/dedup/minhash.py, contamination's prefilter),
the code as first written (mix_assets_tests/oracles/kernels_reference.py) beside the current code,
interleaved in the same run on the same rows; and the per-batch work of dedup_keys' signing
(`minhash.sign_texts`, what `dedup.sign_chunk` runs on its rows) and of contamination_report's scan
(`eval_scan._scan_batch` over SCAN_BATCH_ROWS batches, what `eval_scan.scan_chunk` runs, with the stored
registry and fuzzy index when --storage has them), once with the reference kernels patched in, once
with the current ones. Every pair is also checked for equal outputs.

Rates are text MB per CPU-second of this process (time.process_time, one thread), best of --reps:
on a shared machine, CPU time is steadier than wall time. Corpus: the first --mb MB of the
graph bench's generated prose (--corpus, jsonl with a "text" field), else a generated corpus.

  PYTHONPATH=. .venv/bin/python bench/kernels.py --mb 20 --reps 5 --out bench/results/kernels.md
  PYTHONPATH=. .venv/bin/python bench/kernels.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CORPUS = Path("/tmp/lead/graphbench/100mb/corpus/part_a.jsonl")
STORAGE = Path("/tmp/lead/graphbench/100mb/local-2-in_process/storage")


def load_texts(path: Path, mb: float) -> list[str]:
    out, n = [], 0
    if path.exists():
        with open(path) as f:
            for line in f:
                t = json.loads(line)["text"]
                out.append(t)
                n += len(t.encode())
                if n >= mb * 1e6:
                    return out
        return out
    from mix_assets_tests.support import gen_corpus
    from mix_assets_tests.support.shared_data import find_shared_data

    books = sorted((find_shared_data() / "sources" / "sherlock_holmes").glob("*.txt"))
    return list(gen_corpus.generate_bytes(gen_corpus.MarkovModel.from_files(books), int(mb * 1e6)).texts)


def best(fn, reps: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(reps):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return min(times), out


@contextlib.contextmanager
def reference_kernels():
    """The reference kernels patched into the modules the map stages call through."""
    from mix_assets.stages.audit import contamination as ct
    from mix_assets.stages.audit import fuzzy
    from mix_assets.stages.dedup import minhash as mh
    from mix_assets.core import textkeys as tk
    from mix_assets_tests.oracles import kernels_reference as ref

    saved = [(tk, n, getattr(tk, n)) for n in ("words", "word_hashes", "word_keys", "ngram_hashes", "normalise", "exact_keys")]
    saved += [(mh, n, getattr(mh, n)) for n in ("signatures_from_hashes", "shingle_sets")]
    saved += [(fuzzy, "candidates", fuzzy.candidates), (ct._Bitmap, "candidates", ct._Bitmap.candidates)]
    for mod, n, _ in saved:
        setattr(mod, n, getattr(ref, n) if mod is not ct._Bitmap else ref._Bitmap.candidates)
    try:
        yield
    finally:
        for mod, n, v in saved:
            setattr(mod, n, v)


def same(a, b) -> bool:
    import numpy as np
    import pyarrow as pa

    if isinstance(a, (pa.Array, pa.ChunkedArray)):
        return a.equals(b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if hasattr(a, "__dataclass_fields__"):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--storage", type=Path, default=STORAGE,
                    help="a finished graph run's storage (eval registry, fuzzy index)")
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 MB, 2 repetitions")
    ap.add_argument("--chunks", type=int, default=0,
                    help="also run the map tasks dedup.sign_chunk and eval_scan.scan_chunk on the first N raw "
                         "chunks (engine.chunk_rows rows) of every source in --storage, old vs new per chunk")
    ap.add_argument("--out", type=Path, help="write the table here (markdown)")
    args = ap.parse_args()
    if args.quick:
        args.mb, args.reps = 2.0, 2

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from mix_assets.stages.audit import eval_scan
    from mix_assets.stages.dedup import minhash as mh
    from mix_assets.core import textkeys as tk
    from mix_assets.stages.audit import contamination as ct
    from mix_assets_tests.oracles import kernels_reference as ref

    texts = pa.array(load_texts(args.corpus, args.mb), pa.large_string())
    mb = pc.sum(pc.binary_length(texts)).as_py() / 1e6
    ascii_docs = pc.sum(pc.string_is_ascii(texts).cast("int64")).as_py() / max(len(texts), 1)
    # kernels run batch by batch, as sign_texts cuts its rows (about BATCH_BYTES of text each)
    batches = [texts.slice(s, e - s) for s, e in mh._batches(texts, mh.BATCH_BYTES)]
    wls = [tk.words(x) for x in batches]
    hs = [tk.word_hashes(w) for w in wls]
    g5s = [tk.ngram_hashes(h, off, 5) for h, off in hs]
    norms = [tk.join_words(w) for w in wls]
    a, b = mh.permutations(128)
    reg = None
    index = None
    if (args.storage / "audit").exists():
        from mix_assets.core.storage import Storage

        try:
            st = Storage(root=str(args.storage))
            reg = eval_scan.load_registry(st)[0]
            try:
                index = eval_scan.load_fuzzy_index(st)
            except Exception:  # noqa: BLE001 - a storage without the fuzzy advisory
                index = None
        except Exception as e:  # noqa: BLE001
            print(f"(no registry at {args.storage}: {e})")
    if reg is not None:
        w13s = [tk.ngram_hashes(h, off, 13, short="drop")[0] for h, off in hs]
        bm_new, bm_ref = ct._Bitmap(reg.keys), ref._Bitmap(reg.keys)

    def each(fn, items):
        return lambda m: [fn(m, *x) if isinstance(x, tuple) else fn(m, x) for x in items]

    kernels = [
        ("textkeys.words", each(lambda m, x: m.words(x), batches)),
        ("textkeys.word_hashes", each(lambda m, w: m.word_hashes(w), wls)),
        ("textkeys.word_keys (words + word_hashes + the join)", each(lambda m, x: m.word_keys(x), batches)),
        ("textkeys.ngram_hashes(13)", each(lambda m, h, off: m.ngram_hashes(h, off, 13), hs)),
        ("textkeys.ngram_hashes(5)", each(lambda m, h, off: m.ngram_hashes(h, off, 5), hs)),
        ("textkeys.normalise", each(lambda m, x: m.normalise(x), batches)),
        ("textkeys.exact_keys", each(lambda m, x: m.exact_keys(x), norms)),
        ("minhash.signatures_from_hashes", each(lambda m, g, off: (m if m is ref else mh).signatures_from_hashes(
            mh.shingle_hash32(g), off, a, b), g5s)),
        ("minhash.shingle_sets", each(lambda m, x: (m if m is ref else mh).shingle_sets(x), batches)),
    ]
    if reg is not None:
        kernels.append(("contamination._Bitmap.candidates",
                        each(lambda m, v: (bm_ref if m is ref else bm_new).candidates(v), w13s)))
    if index is not None:
        from mix_assets.stages.audit import fuzzy

        fz = [tk.ngram_hashes(h, off, index.params.shingle) for h, off in hs]
        kernels.append(("fuzzy.candidates",
                        each(lambda m, g, off: (m if m is ref else fuzzy).candidates(index, g, off), fz)))

    def sign():
        return mh.sign_texts(texts, threads=1)

    def scan():
        return [eval_scan._scan_batch(reg, index, None, texts.slice(i, eval_scan.SCAN_BATCH_ROWS))[:2]
                for i in range(0, len(texts), eval_scan.SCAN_BATCH_ROWS)]

    stages = [("dedup signing (minhash.sign_texts, 1 thread)", sign)]
    if reg is not None:
        stages.append(("contamination scan (eval_scan._scan_batch" + (" + fuzzy" if index is not None else "") + ")", scan))

    rows = []
    print(f"{len(texts)} docs, {mb:.1f} MB in {len(batches)} batches, {ascii_docs:.0%} ASCII-only docs, "
          f"best of {args.reps} (CPU seconds)")
    print(f"{'kernel':58s} {'old MB/s':>9s} {'new MB/s':>9s} {'ratio':>6s} same")
    for name, fn in kernels + stages:
        told = tnew = float("inf")
        for _ in range(args.reps):  # interleaved: old, new, old, new ...
            if (name, fn) in kernels:
                t, out_old = best(lambda: fn(ref), 1)
                told = min(told, t)
                t, out_new = best(lambda: fn(tk), 1)
            else:
                with reference_kernels():
                    t, out_old = best(fn, 1)
                told = min(told, t)
                t, out_new = best(fn, 1)
            tnew = min(tnew, t)
        ok = same(out_old, out_new)
        rows.append((name, mb / told, mb / tnew, told / tnew, ok))
        print(f"{name:58s} {mb / told:9.1f} {mb / tnew:9.1f} {told / tnew:6.2f} {ok}")
    chunk_rows = map_tasks(args.storage, args.chunks) if args.chunks else []
    rows += chunk_rows
    if args.out:
        lines = [f"# Text kernels: reference (as first written) vs current, same run",
                 "", f"`{' '.join(sys.argv)}`", "",
                 f"{len(texts)} documents, {mb:.1f} MB of "
                 f"{args.corpus if args.corpus.exists() else 'generated prose'}, "
                 f"{ascii_docs:.0%} ASCII-only documents, in {len(batches)} batches of about 1 MB as `sign_texts` cuts "
                 f"them; text MB per CPU-second (one thread), best of {args.reps}, old and new interleaved.", "",
                 "| kernel | old MB/s | new MB/s | new ÷ old | identical output |", "|---|---|---|---|---|"]
        lines += [f"| {n} | {o:.1f} | {w:.1f} | {r:.2f} | {'yes' if ok else 'NO'} |" for n, o, w, r, ok in rows
                  if (n, o, w, r, ok) not in chunk_rows]
        if chunk_rows:
            lines += ["", f"Map tasks on the raw chunks of `{args.storage}` (first {args.chunks} per source, "
                      "threads=1), text MB per CPU-second summed over the chunks, old and new interleaved per chunk:",
                      "", "| map task | old MB/s | new MB/s | new ÷ old | identical output |", "|---|---|---|---|---|"]
            lines += [f"| {n} | {o:.1f} | {w:.1f} | {r:.2f} | {'yes' if ok else 'NO'} |" for n, o, w, r, ok in chunk_rows]
        args.out.write_text("\n".join(lines) + "\n")
    if not all(r[-1] for r in rows):
        sys.exit("outputs differ")


def map_tasks(storage: Path, per_source: int) -> list[tuple]:
    """dedup.sign_chunk and eval_scan.scan_chunk over the first chunks of every raw source, reference
    kernels vs current (each chunk run once first: the registry cache and code-point tables)."""
    from mix_assets.stages.audit import eval_scan
    from mix_assets.stages.dedup import dedup
    from mix_assets.core import engine
    from mix_assets.core.storage import Storage

    st = Storage(root=str(storage))
    reg = eval_scan.RegistryLocation.of(st)
    fz = eval_scan.RegistryLocation.at(st, eval_scan.fuzzy_index_keys())
    chunks = [rng for p in sorted(storage.glob("raw/*/documents.parquet"))
              for rng in engine.row_ranges(str(p), engine.Engine().chunk_rows)[:per_source]]
    tasks = [("dedup.sign_chunk", lambda rng: dedup.sign_chunk(dedup.SignChunk("bench", rng, 128, 5, 1, 1))),
             ("eval_scan.scan_chunk (13-grams + fuzzy)", lambda rng: eval_scan.scan_chunk(rng, reg, 1, fz))]
    out = []
    for name, fn in tasks:
        told = tnew = 0.0
        mb, ok = 0.0, True
        for rng in chunks:
            fn(rng)
            with reference_kernels():
                t, old = best(lambda: fn(rng), 1)
            told += t
            t, new = best(lambda: fn(rng), 1)
            tnew += t
            if hasattr(old, "fuzzy_seconds"):
                old.fuzzy_seconds = new.fuzzy_seconds = 0.0  # a timing, not an output
            ok &= same(old, new)
            mb += old.text_bytes / 1e6
        out.append((name, mb / told, mb / tnew, told / tnew, ok))
        print(f"{name + f' ({len(chunks)} chunks, {mb:.0f} MB)':58s} {mb / told:9.1f} {mb / tnew:9.1f} "
              f"{told / tnew:6.2f} {ok}")
    return out


if __name__ == "__main__":
    main()
