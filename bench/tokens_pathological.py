"""Pathological documents through each encoder backend: time against size (linear or not), never minutes.

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/tokens_pathological.py

Documents (each at two or three sizes, 10x apart): a single-line document of generated prose (its newlines made
spaces; 0.1 / 1 / 10 MB), a run of one character ("a"; 0.1 / 1 / 10 MB: one pre-tokenizer piece), a run of
spaces (one piece too), a run of "e" (one piece that merges to "ee" tokens: a merge loop that rescans the
piece per merge would be quadratic here), a long run of one repeated word ("hello "). Tokenizer: bench/tokens.py's 32k byte-level
BPE (trained there on its 100 MB generated corpus; run it first). Each (backend, document) is encoded once in a
fresh process (one thread) with a --timeout; the table gives seconds, MB/s and the growth of time per 10x size
(10 = linear).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOK = REPO / "bench" / "out" / "tokens" / "gen_100mb_s7" / "tok32000" / "tokenizer.json"
KINDS = {  # kind -> sizes in MB
    "single-line prose": (0.1, 1, 10),
    "run of 'a'": (0.1, 1, 10),
    "run of spaces": (0.1, 1, 10),
    "run of 'e' (merges to 'ee')": (0.1, 1, 10),
    "repeated word 'hello '": (0.1, 1, 10),
}


def document(kind: str, mb: float) -> str:
    n = int(mb * 1e6)
    if kind == "single-line prose":
        import pyarrow.parquet as pq

        corpus = TOK.parents[1]
        t = pq.read_table(str(corpus / "raw" / "part_a" / "documents.parquet"), columns=["text"]).column(0)
        out, size = [], 0
        for x in t.to_pylist():
            out.append(" ".join(x.split()))
            size += len(out[-1]) + 1
            if size >= n:
                break
        return " ".join(out)[:n]
    if kind == "run of 'a'":
        return "a" * n
    if kind == "run of spaces":
        return " " * n
    if kind.startswith("run of 'e'"):
        return "e" * n
    return ("hello " * (n // 6 + 1))[:n]


def child(backend: str, kind: str, mb: float) -> dict:
    from tokenizers import Tokenizer

    from mix_assets.stages.tokens import backends

    tok = Tokenizer.from_file(str(TOK))
    enc = backends.encoder_for(tok, "fast" if backend == "tiktoken" else "hf")
    text = document(kind, mb)
    t0 = time.perf_counter()
    ids = enc.encode([text], 1)[0]
    return {"secs": time.perf_counter() - t0, "tokens": len(ids), "bytes": len(text.encode())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    ap.add_argument("--child", nargs=3)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], float(a.child[2]))))
        return
    if not TOK.exists():
        raise SystemExit(f"{TOK}: run bench/tokens.py --mb 100 first (it trains the tokenizer)")
    print(f"# bench/tokens_pathological.py: {TOK.relative_to(REPO)}, one thread, timeout {a.timeout:.0f} s")
    print("| document | MB | backend | seconds | MB/s | tokens | time growth for 10x size |")
    print("|---|---|---|---|---|---|---|")
    for kind in a.kinds:
        sizes = KINDS[kind]
        for backend in ("hf", "tiktoken"):
            prev = None
            for mb in sizes:
                cmd = [sys.executable, __file__, "--child", backend, kind, str(mb)]
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, cwd=str(REPO))
                except subprocess.TimeoutExpired:
                    print(f"| {kind} | {mb:g} | {backend} | > {a.timeout:.0f} (timed out) | — | — | — |", flush=True)
                    break
                if r.returncode:
                    raise SystemExit(r.stderr[-2000:])
                got = json.loads(r.stdout.strip().splitlines()[-1])
                growth = f"{got['secs'] / prev:.1f}x" if prev else "—"
                print(f"| {kind} | {mb:g} | {backend} | {got['secs']:.3f} | {got['bytes'] / 1e6 / got['secs']:.2f} | "
                      f"{got['tokens']:,} | {growth} |", flush=True)
                prev = got["secs"]


if __name__ == "__main__":
    main()
