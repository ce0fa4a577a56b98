"""Peak RSS of reading one source (`raw/<source>`), against the size of the source (issue 13 §3).

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/raw_source.py --sizes 50 200

Corpus: ../mix_assets_tests/support/gen_corpus.py (order-2 Markov prose over the shared books, 10 % planted near-copies, as
bench/graph.py makes it), about `--sizes` MB of UTF-8 text in one JSONL source. Config: one source,
a trained tokenizer (so bytes per token is the fallback, no head read), target_tokens set so the raw
budget is 80 % of the source's estimated tokens: the whole source is read (4 x budget is more than
it holds) and about 80 % of it is kept and written to raw/<source>/documents.parquet.

Each read runs `stages/sources/sources.read_raw_source` in a fresh subprocess with `--code` (default: this
checkout) first on its path, so the same corpus can be read by an older revision exported elsewhere
(`git archive <rev> | tar -x -C DIR`). Peak RSS = VmHWM of that process; `base` = VmRSS after the
imports, before reading.

`--modifiers none pii c4 pii,c4` reads the same corpus once per setting, the config given a `filters:`
section with those text modifiers (stages/sources/modifiers.py: PII redaction, C4 line modification), and prints
the throughput (MB of source read per second) of each beside the others:

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/raw_source.py --sizes 50 \
        --modifiers none pii c4 pii,c4

`--compare CONFIG` reads every source of a mix config in ONE process with the old code (stages/sources/sources.py
at `--old REV` (alias `--old-rev`), default main, loaded from git as a module beside the current one)
and with this checkout's on 1 and 2 local threads (`--workers`; the old code on the same counts when
its read_raw_source takes an engine, else once serially), interleaved `--repeats` times after an
untimed warm-up, into scratch storage; each read's documents.parquet, stats.json and asset metadata
(metadata.raw_source, the length chart included) must equal the old code's, and it prints MB of
source read per second (wall) and CPU seconds per variant, with the ratio to the old code:

    PYTHONPATH=$PWD MIX_SHARED_DATA=/work/shared/data .venv/bin/python bench/raw_source.py \
        --compare /tmp/lead/graphbench/100mb/local-2-in_process/mix.yaml --old main --repeats 3 --rss

With `--rss` it then reads the first source once more per code in a fresh process (the old code from
`git archive`) and prints its peak RSS (VmHWM) and the RSS after the imports.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "raw_source"
BPT = 4.0


def _status(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024 / 1e6
    return 0.0


def generate(mb: int):
    """The bench corpus of about `mb` MB (../mix_assets_tests/support/gen_corpus.Corpus), seeded by `mb` (also bench/filters_stage.py's)."""
    sys.path.insert(0, str(REPO))
    from mix_assets_tests.support import gen_corpus as gc
    from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data

    data = find_shared_data() or FIXTURE
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    return gc.generate_bytes(gc.MarkovModel.from_files(books, order=2), int(mb * 1e6), seed=mb)


def child_gen(mb: int, folder: Path) -> None:
    import yaml

    from mix_assets_tests.support import gen_corpus as gc

    corpus = generate(mb)
    path = gc.write_jsonl_sources(corpus, folder / "corpus", ["prose"], seed=mb)["prose"]
    total = sum(len(t.strip().encode()) for t in corpus.texts)
    cfg = {"name": f"raw_bench_{mb}mb", "target_tokens": 10**6, "seed": 1234,
           "sources": [{"name": "prose", "loader": {"kind": "jsonl", "paths": [path]}, "text_field": "text",
                        "license": "generated (CC0)", "rationale": "Markov prose (bench/raw_source.py).",
                        "share": 1.0}],
           "tokenizer": {"kind": "train", "vocab_size": 4096, "bytes_per_token_fallback": BPT},
           "storage": {"root": str(folder / "storage"), "cache_dir": str(folder / "cache")}}
    (folder / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    from mix_assets.config import load_spec

    per_million = load_spec(folder / "mix.yaml").raw_budget("prose")  # raw budget of 10**6 target tokens
    cfg["target_tokens"] = int(0.8 * total / BPT * 10**6 / per_million)
    (folder / "mix.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (folder / "gen.json").write_text(json.dumps({"bytes": total, "docs": len(corpus.texts)}))


def modifier_config(folder: Path, mods: str) -> Path:
    """mix.yaml, or a copy with a `filters:` section switching on the modifiers in `mods` ("pii,c4")."""
    import yaml

    if mods == "none":
        return folder / "mix.yaml"
    cfg = yaml.safe_load((folder / "mix.yaml").read_text())
    cfg["filters"] = {m: ({"mode": "modify"} if m == "c4" else {}) for m in mods.split(",")}
    cfg["storage"]["root"] = str(folder / f"storage-{mods.replace(',', '+')}")
    out = folder / f"mix-{mods.replace(',', '+')}.yaml"
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def child_read(folder: Path, config: Path, name: str = "prose", workers: int = 0, root: str = "") -> dict:
    from mix_assets.config import load_spec
    from mix_assets.stages.sources import sources as lib
    from mix_assets.core.storage import Storage

    spec = load_spec(config)
    storage = Storage(root=root or spec.resolve(spec.storage.root))
    kw = {}
    if workers:  # the chunked reading's engine (older code has none)
        from mix_assets.core.engine import Engine

        kw["eng"] = Engine(num_cpus=workers)
    base = _status("VmRSS")
    t0 = time.perf_counter()
    raw = lib.read_raw_source(storage, spec, name, **kw)
    secs = time.perf_counter() - t0
    mods = {k: {f: v for f, v in m.items() if f not in ("config", "rules_sha256")}
            for k, m in getattr(raw.sample, "modifiers", {}).items()}  # an older --code has none
    return {"secs": round(secs, 1), "base_mb": round(base),
            "peak_mb": round(_status("VmHWM")), "rows_read": raw.sample.rows_read, "docs": raw.docs,
            "bytes_read_mb": round(raw.sample.bytes_read / 1e6, 1),
            "kept_mb": round(raw.text_bytes / 1e6, 1),
            "mb_per_s": round(raw.sample.bytes_read / 1e6 / secs, 2), **({"modifiers": mods} if mods else {})}


def _old_sources(rev: str):
    """stages/sources/sources.py as of `rev`, imported as its own module (the rest of mix_assets is this checkout's)."""
    import types

    for path in ("mix_assets/stages/sources/sources.py", "mix_assets/lib/sources.py"):  # the latter before the stage layout
        got = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        if got.returncode == 0:
            break
    got.check_returncode()
    text = got.stdout
    mod = types.ModuleType("mix_assets.stages.sources._sources_old")
    mod.__file__ = f"{rev}:{path}"
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(text, mod.__file__, "exec"), mod.__dict__)
    return mod


def compare(config: Path, old_rev: str, workers: list[int], repeats: int, rss: bool) -> None:
    import hashlib
    import shutil
    import statistics
    import tempfile

    sys.path.insert(0, str(REPO))
    from mix_assets.stages.sources import metadata as md
    from mix_assets.config import load_spec
    from mix_assets.core import layout
    from mix_assets.stages.sources import sources as new
    from mix_assets.core.engine import Engine
    from mix_assets.core.storage import Storage

    spec, old = load_spec(config), _old_sources(old_rev)
    names = [s.name for s in spec.sources]
    # the old code on the same worker counts when it takes an engine (older code reads serially)
    takes_eng = "eng" in inspect.signature(old.read_raw_source).parameters
    variants = {} if takes_eng else {"old": None}
    for w in workers:  # interleaved: old-1 new-1 old-2 new-2
        variants.update({**({f"old-{w}": Engine(num_cpus=w)} if takes_eng else {}), f"new-{w}": Engine(num_cpus=w)})
    scratch = Path(tempfile.mkdtemp(prefix="raw_source_bench-"))

    def read(variant: str, name: str) -> tuple[float, float, int, str]:
        root = scratch / variant
        shutil.rmtree(root, ignore_errors=True)
        st = Storage(root=str(root))
        w0, c0 = time.perf_counter(), time.process_time()
        if variant.startswith("old"):
            raw = old.read_raw_source(st, spec, name, **({"eng": variants[variant]} if variants[variant] else {}))
        else:
            raw = new.read_raw_source(st, spec, name, eng=variants[variant])
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        keys = (layout.RAW_DOCS.format(source=name), layout.RAW_STATS.format(source=name))
        meta = {k: repr(v) for k, v in md.raw_source(st, keys[0], raw).items() if k != "path"}
        digest = hashlib.sha256(b"".join(Path(st.local_path(k)).read_bytes() for k in keys)
                                + json.dumps(meta, sort_keys=True).encode()).hexdigest()
        return wall, cpu, raw.sample.bytes_read, digest

    for v in variants:  # warm-up: imports, first-call costs
        read(v, names[0])
    runs: dict[str, list[tuple[float, float, int]]] = {v: [] for v in variants}
    for rep in range(repeats):
        for v in variants:
            wall = cpu = nbytes = 0
            for name in names:
                w, c, b, digest = read(v, name)
                want = digests.setdefault(name, digest)
                if digest != want:
                    raise SystemExit(f"{v}: raw/{name} differs from the old code's (documents, stats or metadata)")
                wall, cpu, nbytes = wall + w, cpu + c, nbytes + b
            runs[v].append((wall, cpu, nbytes))
            print(json.dumps({"repeat": rep, "code": v, "sources": len(names), "mb_read": round(nbytes / 1e6, 1),
                              "secs": round(wall, 2), "cpu_secs": round(cpu, 2),
                              "mb_per_s": round(nbytes / 1e6 / wall, 1),
                              "load_avg_1min": round(os.getloadavg()[0], 1)}), flush=True)
    if rss:  # peak RSS of one source's read, each in a fresh process
        old_tree = scratch / "old-code"
        old_tree.mkdir()
        tar = subprocess.run(["git", "-C", str(REPO), "archive", old_rev], check=True, stdout=subprocess.PIPE).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=tar, check=True)
        for v, (code, w) in {"old": (old_tree, workers[-1] if takes_eng else 0),
                             **{f"new-{w}": (REPO, w) for w in workers}}.items():
            got = json.loads(run(["--child", "read", str(scratch), str(config), names[0], str(w),
                                  str(scratch / f"rss-{v}")], code))
            print(json.dumps({"rss": names[0], "code": v, "mb_read": got["bytes_read_mb"], "secs": got["secs"],
                              "base_mb": got["base_mb"], "peak_mb": got["peak_mb"]}), flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"\n{'code':8} {'MB/s (median)':>14} {'CPU s (median)':>15} {'x old':>6}   (identical bytes in every run; "
          "x old: against the old code on as many workers, else its serial read)")
    for v, rs in runs.items():
        ref = runs.get(v.replace("new", "old"), runs.get("old", rs))
        mbps = statistics.median(r[2] / r[0] for r in rs) / 1e6
        print(f"{v:8} {mbps:14.1f} {statistics.median(r[1] for r in rs):15.2f} "
              f"{mbps * 1e6 / statistics.median(r[2] / r[0] for r in ref):6.2f}")


digests: dict[str, str] = {}


def run(args: list[str], code: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(code)}
    return subprocess.run([sys.executable, __file__, *args], env=env, check=True,
                          stdout=subprocess.PIPE, text=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 200], help="MB of text per corpus")
    ap.add_argument("--code", type=Path, default=REPO, help="checkout whose mix_assets reads the source")
    ap.add_argument("--modifiers", nargs="+", default=["none"],
                    help="text modifier settings to compare: none, pii, c4, pii,c4")
    ap.add_argument("--compare", type=Path, metavar="CONFIG",
                    help="old vs new code in one process on every source of this mix config")
    ap.add_argument("--old", "--old-rev", dest="old_rev", default="main",
                    help="--compare: the revision of the old stages/sources/sources.py")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="--compare: local threads of the new code")
    ap.add_argument("--repeats", type=int, default=3, help="--compare: interleaved timed repeats")
    ap.add_argument("--rss", action="store_true",
                    help="--compare: also the peak RSS of reading the first source, each code in a fresh process")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.compare:
        compare(a.compare, a.old_rev, a.workers, a.repeats, a.rss)
        return
    if a.child:
        kind, folder, *config = a.child
        if kind == "gen":
            child_gen(int(Path(folder).name.removesuffix("mb")), Path(folder))
        else:
            name, workers, root = (config[1:] + ["prose", "0", ""])[:3] if len(config) > 1 else ("prose", "0", "")
            print(json.dumps(child_read(Path(folder), Path(config[0]), name, int(workers), root)))
        return
    for mb in a.sizes:
        folder = OUT / f"{mb}mb"
        if not (folder / "gen.json").exists():
            folder.mkdir(parents=True, exist_ok=True)
            run(["--child", "gen", str(folder)], REPO)
        for mods in a.modifiers:
            config = modifier_config(folder, mods)
            got = json.loads(run(["--child", "read", str(folder), str(config)], a.code))
            print(json.dumps({"mb": mb, "code": str(a.code), "with": mods, **got}), flush=True)


if __name__ == "__main__":
    main()
