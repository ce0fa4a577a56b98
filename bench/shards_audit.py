"""Cost of the blocking check `shards_audit_clean` (manifest asset): seconds per 100 MB of text, growth.

    PYTHONPATH=$PWD /work/main/.venv/bin/python bench/shards_audit.py --sizes 100 400 --reps 3 --threads 2

What the check runs is `stages/audit/published.audit_published(<root>/mix, spec, cache_dir)`: open the
train and val splits with `reader.open_mix` (manifest check, shard sha256 on first use), build the eval
registry from the config's tasks (non-test splits), decode every sample with the mix's tokenizer and
count 13-gram overlaps. This script measures, each in a fresh subprocess (RAYON_NUM_THREADS fixed
before import; peak RSS = VmHWM of that process), tools interleaved per repetition, medians reported:

  audit   = the full `audit_published` call, exactly as the check calls it (temporary cache dir)
  old     = the same call with the scanner as it was before the byte-table decoding
            (mix_assets_tests/oracles/published_audit_ref.py, patched in): the before figure, in
            the same run; its report must be byte-identical to `audit`'s (checked, else the run stops)
  decode  = the physical-limit reference: the same samples read through the same readers in the
            same chunks (`chunk_tokens // sample_len` samples) and `Tokenizer.decode_batch`ed whole,
            nothing else (same tokenizer file, same thread count)
  ref     = `load_reference(spec)` alone: the eval registry build, a fixed cost independent of the
            corpus (it is included in `audit`)

Corpus and shards reuse bench/tokens_prose.py (imported, not copied): `build_corpus(mb)` (the prose and
GSM8K files of ../shared/data/sources cut into ~1.5-4 KB documents and repeated with 2 % seeded word
edits until the target size), its 32k byte-level BPE (`tokenizer_file`) and budgets (`spec_for`:
97 % of the train tokens). The corpus is therefore the same shared-data prose many times over with
small edits. That is acceptable here: decoding and the n-gram scan cost per byte/word and do not
look for repeats (every window is hashed and looked up whatever the duplication; only the ~3 % of
windows past the bitmap prefilter differ, and the registry is the same at every size), but the
figures are for this text, not for a deduplicated web crawl.

The spec differs from tokens_prose.py's in three ways: `packing.separator: "<|endoftext|>"` (as in
configs/demo.yaml and configs/shared-sample.yaml, so the audit cuts the stream into documents),
`audit.tasks` = the five non-test eval splits of ../shared/data/evals configured as in
configs/shared-sample.yaml, and its own storage root under bench/out/shards_audit/ (raw/, dedup/,
masks/, split/ are symlinks to the tokens corpus, so tokens_prose.py's shards are left alone). The
root is made a valid mix dir the way the graph makes it: `build_tokenizer` (kind file),
`build_token_shards`, then `write_manifest` as the manifest asset calls it. The in-graph
contamination report is not run: a stub JSON stands in for review/contamination_report.json (the
manifest only copies and hashes it; the published audit never reads it).

"corpus MB" in the table is the UTF-8 size of the text the shards decode to (what the audit reads,
separator tokens included as text); s/100 MB is audit seconds per 100 of those MB.

`--config <mix.yaml>` (repeatable) audits instead the mix/ dir an existing build left under that
config's storage root (e.g. a copy of bench/graph.py's run), with that config's tasks: old vs new only.

`--old REV` makes `old` the whole audit as the commit REV had it (its mix_assets, extracted with
`git archive` to a temporary folder and imported by those children instead of this checkout's), so
any two revisions are compared in one run, interleaved, reports checked byte-identical:

    PYTHONPATH=$PWD /work/main/.venv/bin/python bench/shards_audit.py --config /tmp/copy/mix.yaml --reps 3 --old ba34ae0
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# `--old REV`: the "old" children import mix_assets from REV's tree (extracted by `old_tree`)
CODE = os.environ.get("SHARDS_AUDIT_CODE")
sys.path.insert(0, CODE or str(REPO))
OLD_CODE: str | None = None  # set by --old: the tree the "old" tool runs

import tokens_prose as bt  # noqa: E402 - bench/tokens_prose.py, beside this script (its folder is sys.path[0])
OUT = REPO / "bench" / "out" / "shards_audit"
EVALS = bt.DATA.parent / "evals"
# the five non-test eval splits of ../shared/data, configured as in configs/shared-sample.yaml
TASKS = [
    ("hellaswag", "hellaswag", "validation", ["ctx", "endings"], 10000),
    ("arc_challenge", "arc_challenge", "test", ["question.stem", "question.choices.text"], 290),
    ("piqa", "piqa", "validation", ["goal", "sol1", "sol2"], 1800),
    ("boolq", "boolq", "validation", ["question", "passage"], 3000),
    ("commonsense_qa", "commonsenseqa", "validation", ["question.stem", "question.choices.text"], 1200),
]
LINKED = ("raw", "dedup", "masks", "split")


# -- the mix dir -----------------------------------------------------------------------------------


def audit_spec_data(corpus: Path, root: Path, tok: Path) -> dict:
    bt.spec_for(corpus, tok)  # budgets from the corpus (writes corpus/bench_spec.json)
    data = json.loads((corpus / "bench_spec.json").read_text())
    data["name"] = "bench_audit"
    data["packing"]["separator"] = "<|endoftext|>"
    data["storage"] = {"root": str(root)}
    data["audit"] = {
        "ngram": 13,
        "tasks": [
            {"name": name, "dataset": {"kind": "local", "path": str(EVALS / folder)}, "scored_split": scored,
             "audit_splits": ["validation"], "fields": fields, "min_rows": min_rows}
            for name, folder, scored, fields, min_rows in TASKS
        ],
    }
    return data


def load_audit_spec(root: Path):
    from mix_assets.config import parse_spec

    return parse_spec(json.loads((root / "audit_spec.json").read_text()), str(root / "audit.yaml"))


def prepare(mb: int, corpus: Path, tok: Path, threads: int) -> Path:
    """bench/out/shards_audit/mix_<mb>mb: a storage root whose mix/ is a valid mix dir."""
    root = OUT / f"mix_{mb}mb"
    root.mkdir(parents=True, exist_ok=True)
    for d in LINKED:
        if not (root / d).exists():
            (root / d).symlink_to(corpus / d, target_is_directory=True)
    data = audit_spec_data(corpus, root, tok)
    text = json.dumps(data, sort_keys=True)
    key = hashlib.sha256((text + tok.read_bytes().hex()[:64]).encode()).hexdigest()
    if (root / "done").exists() and (root / "done").read_text() == key:
        return root
    (root / "audit_spec.json").write_text(text)
    t0 = time.perf_counter()
    run("build", root, threads)
    (root / "done").write_text(key)
    print(f"built {root} in {time.perf_counter() - t0:.0f} s", flush=True)
    return root


def build(root: Path) -> dict:
    from mix_assets.core import layout
    from mix_assets.stages.manifest.builder import write_manifest
    from mix_assets.stages.tokens.shards import build_token_shards
    from mix_assets.core.storage import Storage
    from mix_assets.stages.tokens.tokenizer import build_tokenizer

    spec = load_audit_spec(root)
    st = Storage(str(root))
    build_tokenizer(st, spec)  # the tokenizer asset: mix/tokenizer/ + identity (deletes mix/manifest.json)
    res = build_token_shards(st, spec, scratch_dir=str(root))
    st.write_text(layout.CONTAMINATION_REPORT,
                  json.dumps({"bench": "stub: the in-graph audit is not run by bench/shards_audit.py"}) + "\n")
    m = write_manifest(st, name=spec.name, seed=spec.seed, spec_dump=spec.model_dump(mode="json"))
    return {"shards": m["totals"]["shards"], "tokens": m["totals"]["train_tokens"] + m["totals"]["val_tokens"],
            "encoded_bytes": res.encoded_bytes}


# -- measurements (children) -----------------------------------------------------------------------


def _spec_root(root: str):
    """(spec, storage root): a generated corpus's root, or `config:<mix.yaml>` (its storage root)."""
    if root.startswith("config:"):
        from mix_assets.config import load_spec

        spec = load_spec(root[len("config:"):])
        return spec, Path(spec.storage.root)
    return load_audit_spec(Path(root)), Path(root)


def audit(root: str, old: bool = False) -> dict:
    import contextlib

    from mix_assets.core import layout
    from mix_assets.stages.audit.published import audit_published, dumps
    from mix_assets.core.storage import Storage
    from mix_assets_tests.oracles import published_audit_ref

    spec, path = _spec_root(root)
    st = Storage(str(path))
    c0 = bt.cpu_s()
    t0 = time.perf_counter()
    with published_audit_ref.patched() if old else contextlib.nullcontext():
        with tempfile.TemporaryDirectory(prefix="shards-audit-", dir=str(path)) as cache:  # as the check does
            report = audit_published(st.uri(layout.MIX_DIR), spec, cache)
    dt = time.perf_counter() - t0
    sp = report["splits"]
    return {"secs": dt, "cpu": bt.cpu_s() - c0, "tokens": sum(v["tokens_scanned"] for v in sp.values()),
            "words": sum(v["words_scanned"] for v in sp.values()), "pieces": sum(v["pieces"] for v in sp.values()),
            "overlap_total": report["overlap_total"], "samples_with_overlap": report["samples_with_overlap"],
            "denominator_problems": len(report["denominator_problems"]), "passed": report["passed"],
            "short_carries": sum(v["short_carries"] for v in sp.values()),
            "report_sha256": hashlib.sha256(dumps(report).encode()).hexdigest()}


def decode(root: str, chunk_tokens: int = 1 << 20) -> dict:
    """The same samples, readers and chunks as audit_published; decode_batch of whole samples only."""
    from tokenizers import Tokenizer

    from mix_assets.core import layout
    from mix_assets.stages.audit.published import SPLITS, TOKENIZER_FILE
    from mix_assets.core.storage import Storage
    from mix_assets.reader import open_mix

    st = Storage(str(_spec_root(root)[1]))
    nbytes = ntok = 0
    read_s = dec_s = 0.0
    c0 = bt.cpu_s()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shards-decode-", dir=str(_spec_root(root)[1])) as cache:
        readers = {s: open_mix(st.uri(layout.MIX_DIR), cache, split=s, shuffle=False, epochs=1) for s in SPLITS}
        tok = Tokenizer.from_file(readers["train"].file_path(TOKENIZER_FILE))
        for r in readers.values():
            step = max(1, chunk_tokens // r.sample_len)
            for first in range(0, len(r), step):
                a = time.perf_counter()
                x = r.samples(first, min(step, len(r) - first))
                b = time.perf_counter()
                texts = tok.decode_batch([s.tolist() for s in x], skip_special_tokens=False)
                c = time.perf_counter()
                read_s += b - a
                dec_s += c - b
                ntok += x.size
                nbytes += sum(len(t.encode()) for t in texts)  # outside read_s/dec_s (inside secs)
                del texts
    dt = time.perf_counter() - t0
    return {"secs": read_s + dec_s, "read_s": read_s, "decode_batch_s": dec_s, "loop_with_byte_count_s": dt,
            "cpu": bt.cpu_s() - c0, "tokens": ntok, "text_bytes": nbytes}


def reference(root: str) -> dict:
    from mix_assets.stages.audit.published import load_reference

    spec = _spec_root(root)[0]
    c0 = bt.cpu_s()
    t0 = time.perf_counter()
    ref = load_reference(spec)
    dt = time.perf_counter() - t0
    return {"secs": dt, "cpu": bt.cpu_s() - c0,
            "ngrams": sum(d["ngrams"] for d in ref.denominators.values()),
            "rows": sum(d["rows"] for d in ref.denominators.values())}


def child(tool: str, root: str) -> None:
    out = {"build": lambda r: build(Path(r)), "audit": audit, "old": lambda r: audit(r, old=not CODE), "decode": decode,
           "ref": reference}[tool](root)
    out["peak_rss_mb"] = bt.vmhwm_mb()
    print(json.dumps(out))


def run(tool: str, root, threads: int) -> dict:
    env = {**os.environ, "RAYON_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO)}
    env.pop("SHARDS_AUDIT_CODE", None)
    if tool == "old" and OLD_CODE:
        env["SHARDS_AUDIT_CODE"] = env["PYTHONPATH"] = OLD_CODE
    r = subprocess.run([sys.executable, __file__, "--child", tool, str(root)], env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"{tool} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# -- main ------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 400])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--config", action="append", default=[],
                    help="audit the mix/ dir under this mix.yaml's storage root (old vs new only; repeatable)")
    ap.add_argument("--old", metavar="REV", help="old = the audit as git revision REV has it (default: this "
                    "checkout with the scanner of mix_assets_tests/oracles/published_audit_ref.py)")
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        return child(*a.child)
    if a.old:
        with tempfile.TemporaryDirectory(prefix="shards-audit-old-") as tree:
            return run_main(a, old_tree(a.old, tree))
    return run_main(a, None)


def old_tree(rev: str, dest: str) -> str:
    """`rev`'s mix_assets and mix_assets_tests packages extracted into `dest` (git archive)."""
    arch = subprocess.run(["git", "-C", str(REPO), "archive", rev, "mix_assets", "mix_assets_tests"],
                          capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=arch, check=True)
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev], capture_output=True, text=True,
                         check=True).stdout.strip()
    print(f"old = revision {rev} ({sha}), extracted to {dest}", flush=True)
    return dest


def run_main(a, old_code: str | None) -> None:
    global OLD_CODE
    OLD_CODE = old_code
    if a.config:
        return main_configs(a)
    tools = ["audit", "old", "decode", "ref"]
    corpora = {mb: bt.build_corpus(mb) for mb in a.sizes}
    tok = bt.tokenizer_file(corpora[a.sizes[0]])
    roots = {mb: prepare(mb, c, tok, a.threads) for mb, c in corpora.items()}
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2 cores, shared)")
    print(f"tokenizer: {tok} (32k byte-level BPE), separator <|endoftext|>, threads={a.threads}, "
          f"reps={a.reps} (median); audit tasks: {', '.join(t[0] for t in TASKS)} (validation splits)", flush=True)
    rows = []
    for mb, root in roots.items():
        res = {t: [] for t in tools}
        for k in range(a.reps):
            for tool in (tools if k % 2 == 0 else tools[::-1]):
                res[tool].append(run_logged(tool, root, a.threads, f"{mb} MB rep {k}"))
        m = json.loads((root / "mix" / "manifest.json").read_text())
        raw_bytes = sum(os.path.getsize(p) for p in (root / "raw").glob("*/documents.parquet"))
        shard_bytes = sum(s["bytes"] for sp in m["splits"].values() for s in sp["shards"])
        med = {t: statistics.median(r["secs"] for r in res[t]) for t in tools}
        med.update({f"{t}_cpu": statistics.median(r["cpu"] for r in res[t]) for t in tools})
        text_mb = res["decode"][0]["text_bytes"] / 1e6
        a0 = res["audit"][0]
        rows.append((mb, text_mb, shard_bytes / 1e6, a0["tokens"], med, res))
        print(f"\n## corpus {mb} MB: {m['totals']['shards']} shards, raw parquet {raw_bytes / 1e6:.0f} MB; audit: "
              f"{a0['words']:,} words, {a0['pieces']:,} pieces, overlap_total {a0['overlap_total']}, "
              f"samples_with_overlap {a0['samples_with_overlap']}, passed {a0['passed']}, "
              f"short_carries {a0['short_carries']}")
        for t in tools:
            secs = ", ".join(f"{r['secs']:.2f}" for r in res[t])
            cpu = ", ".join(f"{r['cpu']:.1f}" for r in res[t])
            print(f"  {t} runs (s): {secs}; CPU s: {cpu}")
        d = res["decode"]
        print(f"  decode split: read {statistics.median(r['read_s'] for r in d):.2f} s + decode_batch "
              f"{statistics.median(r['decode_batch_s'] for r in d):.2f} s (medians)")
        print(f"  ref: {res['ref'][0]['rows']:,} eval rows, {res['ref'][0]['ngrams']:,} reference n-grams")
        print(old_vs_new(f"{mb} MB corpus", text_mb, res))
    print(f"\nload average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2 cores, shared)")
    print("\n| corpus MB (UTF-8 text) | shard MB | tokens | audit s | s / 100 MB | decode-only s | audit / decode "
          "| ref build s | audit CPU s | CPU s / 100 MB | decode CPU s | audit / decode (CPU) "
          "| audit peak RSS MB | decode peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mb, text_mb, shard_mb, ntok, med, res in rows:
        print(f"| {text_mb:.1f} ({mb} MB corpus) | {shard_mb:.1f} | {ntok:,} | {med['audit']:.2f} | "
              f"{100 * med['audit'] / text_mb:.2f} | {med['decode']:.2f} | {med['audit'] / med['decode']:.2f} | "
              f"{med['ref']:.2f} | {med['audit_cpu']:.1f} | {100 * med['audit_cpu'] / text_mb:.2f} | "
              f"{med['decode_cpu']:.1f} | {med['audit_cpu'] / med['decode_cpu']:.2f} | "
              f"{statistics.median(r['peak_rss_mb'] for r in res['audit']):.0f} | "
              f"{statistics.median(r['peak_rss_mb'] for r in res['decode']):.0f} |")
    if len(rows) > 1:
        (m0, t0, _, _, d0, _), (m1, t1, _, _, d1, _) = rows[0], rows[-1]
        ex0, ex1 = d0["audit"] - d0["ref"], d1["audit"] - d1["ref"]
        cx0, cx1 = d0["audit_cpu"] - d0["ref_cpu"], d1["audit_cpu"] - d1["ref_cpu"]
        print(f"\ngrowth {m0} -> {m1} MB corpus: text x{t1 / t0:.2f}; wall: audit x{d1['audit'] / d0['audit']:.2f}, "
              f"audit minus ref build x{ex1 / ex0:.2f}, decode-only x{d1['decode'] / d0['decode']:.2f}; "
              f"CPU: audit x{d1['audit_cpu'] / d0['audit_cpu']:.2f}, audit minus ref build x{cx1 / cx0:.2f}, "
              f"decode-only x{d1['decode_cpu'] / d0['decode_cpu']:.2f}")

def run_logged(tool: str, root, threads: int, label: str) -> dict:
    r = run(tool, root, threads)
    print(f"  {label} {tool}: {r['secs']:.2f} s (cpu {r['cpu']:.1f} s, peak {r['peak_rss_mb']:.0f} MB)", flush=True)
    return r


def old_vs_new(label: str, text_mb: float, res: dict) -> str:
    """The before/after line: medians of the interleaved runs; the reports must be the same bytes."""
    shas = {r["report_sha256"] for t in ("audit", "old") for r in res[t]}
    if len(shas) != 1:
        raise SystemExit(f"{label}: the old and new scanners wrote different reports ({sorted(shas)})")
    old, new = (statistics.median(r["secs"] for r in res[t]) for t in ("old", "audit"))
    oc, nc = (statistics.median(r["cpu"] for r in res[t]) for t in ("old", "audit"))
    return (f"  OLD vs NEW ({label}, {text_mb:.1f} MB of text, reports identical, sha256 {shas.pop()[:12]}): "
            f"old {old:.2f} s = {text_mb / old:.2f} MB/s, new {new:.2f} s = {text_mb / new:.2f} MB/s, "
            f"new/old speed x{old / new:.2f} (wall); CPU old {oc:.1f} s, new {nc:.1f} s, x{oc / nc:.2f}")


def main_configs(a) -> None:
    """Old vs new scanner on existing builds (`--config`), interleaved, medians."""
    print(f"load average at the start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2 cores, shared); "
          f"threads={a.threads}, reps={a.reps} (median)", flush=True)
    lines = []
    for cfg in a.config:
        root, tools = f"config:{Path(cfg).resolve()}", ["audit", "old"]
        res = {t: [] for t in tools}
        for k in range(a.reps):
            for tool in (tools if k % 2 == 0 else tools[::-1]):
                res[tool].append(run_logged(tool, root, a.threads, f"{Path(cfg).parent.name} rep {k}"))
        text_mb = run_logged("decode", root, a.threads, f"{Path(cfg).parent.name}")["text_bytes"] / 1e6
        lines.append(old_vs_new(cfg, text_mb, res))
        print(lines[-1], flush=True)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} (2 cores, shared)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
