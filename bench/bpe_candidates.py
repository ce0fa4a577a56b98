"""The fast-backend candidates on one vocabulary both can load: tiktoken and bpe-openai (rust-gems `bpe` crate).

    PYTHONPATH=$PWD .venv/bin/python bench/bpe_candidates.py --mb 20

bpe-openai 0.1.4 builds its Rust tokenizer only for the vocabularies it bundles (cl100k_base, o200k_base), not
from a tokenizer.json's ranks, so it cannot be token_shards' backend for the tokenizers users bring. To compare
speed anyway: its bundled cl100k_base ranks are loaded into tiktoken too (cl100k's pattern), and both encode the
same text (bench/tokens.py's generated corpus, first --mb MB), one document at a time on one thread, ids
compared. Needs `pip install bpe-openai` (not a project dependency).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "bench" / "out" / "tokens" / "gen_100mb_s7" / "raw" / "part_a" / "documents.parquet"
CL100K = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=20)
    a = ap.parse_args()
    import bpe_openai
    import pyarrow.parquet as pq
    import tiktoken
    from bpe_openai import registry

    texts, size = [], 0
    for t in pq.read_table(str(CORPUS), columns=["text"]).column(0).to_pylist():
        texts.append(t)
        size += len(t.encode())
        if size >= a.mb * 1e6:
            break
    ranks = registry._load_mergeable_ranks("cl100k_base")
    tt = tiktoken.Encoding("cl100k_from_bpe_openai", pat_str=CL100K, mergeable_ranks=ranks, special_tokens={})
    bo = bpe_openai.get_encoding("cl100k_base")
    print(f"# bench/bpe_candidates.py: {len(texts):,} documents, {size / 1e6:.1f} MB, cl100k_base, one thread")
    out = {}
    for name, fn in (("tiktoken", tt.encode_ordinary), ("bpe-openai", bo.encode_ordinary)):
        fn(texts[0])
        t0, c0 = time.perf_counter(), time.process_time()
        ids = [fn(t) for t in texts]
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        out[name] = (ids, cpu)
        print(f"| {name} | {secs:.2f} s wall | {cpu:.2f} CPU s | {size / 1e6 / cpu:.2f} MB per CPU s |")
    same = sum(x == y for x, y in zip(out["tiktoken"][0], out["bpe-openai"][0]))
    print(f"bpe-openai / tiktoken speed (CPU): {out['tiktoken'][1] / out['bpe-openai'][1]:.2f}; "
          f"identical ids on {same:,} of {len(texts):,} documents")


if __name__ == "__main__":
    main()
