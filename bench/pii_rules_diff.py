"""core/pii.scrub at one git revision against the working tree's, on all of the shared data's text, in one
process: redactions per rule for each, every document whose output differs (to judge new hits), and the
process CPU seconds of each scrub (CPU, not wall: the machine is shared), alternated over `--reps`.

    .venv/bin/python bench/pii_rules_diff.py [--old main] [--reps 3] [--data ../shared/data]

Documents: every paragraph (blank-line separated) of the `.txt` files and every string field of every
`.jsonl` row (sources and evals). `--wide` also scrubs a full-width copy of them (every printable ASCII
character as its U+FF01-FF5E form, spaces as U+3000) and one in Arabic-Indic digits with both rule sets,
and compares the new rules' redactions per document with the ASCII text's: they should be the same.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FORMS = {"full-width": {i: i + 0xFEE0 for i in range(0x21, 0x7F)} | {0x20: 0x3000},
         "Arabic-Indic digits": str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")}


def strings(x):
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from strings(v)


def documents(data: Path) -> list[str]:
    docs = []
    for p in sorted(data.rglob("*")):
        if p.suffix == ".txt":
            t = p.read_bytes().decode("utf-8", "replace").replace("\r\n", "\n")
            docs += [x for x in re.split(r"\n\s*\n", t) if x.strip()]
        elif p.suffix == ".jsonl":
            docs += [s for line in p.read_text().splitlines() if line.strip() for s in strings(json.loads(line))]
    return docs


def load_old(ref: str):
    src = subprocess.run(["git", "-C", str(REPO), "show", f"{ref}:mix_assets/core/pii.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "pii_old.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("pii_old", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pii_old"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def cpu(fn, *a):
    t = time.process_time()
    out = fn(*a)
    return out, time.process_time() - t


def totals(counts) -> dict:
    return {n: int(sum(counts.column(n).to_pylist())) for n in counts.column_names}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", default="main")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--wide", action="store_true")
    a = ap.parse_args()
    import pyarrow as pa

    from mix_assets.core import pii as new

    old = load_old(a.old)
    docs = documents(Path(a.data))
    arr = pa.array(docs, pa.large_string())
    print(f"{len(docs):,} documents, {sum(map(len, docs)) / 1e6:.1f} M characters; old = {a.old} "
          f"(rules version {old.SCRUB_RULES_VERSION}), new = working tree (rules version {new.SCRUB_RULES_VERSION})")
    times = {"old": [], "new": []}
    for _ in range(a.reps):
        (o_out, o_counts), t_old = cpu(old.scrub, arr)
        (n_out, n_counts), t_new = cpu(new.scrub, arr)
        times["old"].append(t_old)
        times["new"].append(t_new)
    for k, ts in times.items():
        print(f"{k}: CPU s per scrub {', '.join(f'{t:.2f}' for t in ts)} (min {min(ts):.2f})")
    print(f"new / old CPU (min over reps): {min(times['new']) / min(times['old']):.2f}")
    print(f"redactions old {totals(o_counts)}")
    print(f"redactions new {totals(n_counts)}")
    o_list, n_list = o_out.to_pylist(), n_out.to_pylist()
    diff = [i for i, (x, y) in enumerate(zip(o_list, n_list)) if x != y]
    print(f"{len(diff)} documents differ")
    for i in diff:
        print(f"--- doc {i}\n  old: {o_list[i]!r}\n  new: {n_list[i]!r}")
    if a.wide:
        rows_a = n_counts.to_pylist()
        for form, table in FORMS.items():
            wide = pa.array([d.translate(table) for d in docs], pa.large_string())
            (w_out, w_counts), t_w = cpu(new.scrub, wide)
            (_, ow_counts), t_ow = cpu(old.scrub, wide)
            print(f"\n{form} copy: new CPU {t_w:.2f} s, redactions {totals(w_counts)}; "
                  f"old CPU {t_ow:.2f} s, redactions {totals(ow_counts)}")
            rows_w = w_counts.to_pylist()
            off = [i for i, (x, y) in enumerate(zip(rows_a, rows_w)) if x != y]
            print(f"{len(off)} documents where the {form} copy's redactions differ from the ASCII text's")
            for i in off[:20]:
                print(f"--- doc {i} ascii {rows_a[i]} {form} {rows_w[i]}\n  {n_list[i]!r}\n  {w_out[i].as_py()!r}")

if __name__ == "__main__":
    main()
