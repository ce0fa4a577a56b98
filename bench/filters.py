"""Benchmark: the heuristic quality filters (stages/filters/cascade.py) beside datatrove's, same documents, same run.

Corpus: the shared prose (every text file under ../shared/data/sources, paragraphs grouped into ~3 KB
documents, hard-wrapped lines kept) plus generated prose (../mix_assets_tests/support/gen_corpus.py, a Markov chain trained on
the same files); a seeded share of the documents is made web-like so that every rule fires somewhere:
navigation lines, cookie / terms footers, bullet lists, repeated lines, "Read more..." lines, hashtags,
citations, JavaScript notices, lorem ipsum, code with braces, and very short documents.

Filters, each run on every document on its own (the datatrove class with its defaults; ours with
`FilterConfig.only(name)`, C4 in its "modify" mode): GopherQualityFilter, GopherRepetitionFilter,
C4QualityFilter, FineWebQualityFilter. Reported: documents/s and MB/s per filter and in total, the
ratio ours/datatrove, and per filter the share of identical keep/drop decisions, with the
disagreements counted by rule and a few listed (bench/out/filters/disagreements.jsonl holds all).
For C4 also the share of documents both keep whose rewritten text is identical.

datatrove runs in a child process of its own Python (--datatrove-python, default this one), which
needs `datatrove==0.10.1 spacy==3.8.18 regex` (the `bench` extra; spaCy is its English word tokenizer):
  python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install 'datatrove==0.10.1' 'spacy==3.8.18' 'regex==2026.11.19'
  .venv/bin/python bench/filters.py --datatrove-python /tmp/dtvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "out" / "filters"
FILTERS = ("gopher_quality", "gopher_repetition", "c4", "fineweb")
DT_CLASS = {"gopher_quality": "GopherQualityFilter", "gopher_repetition": "GopherRepetitionFilter",
            "c4": "C4QualityFilter", "fineweb": "FineWebQualityFilter"}

NAV = ["Home", "About us", "Contact", "Menu", "Search", "Login", "Subscribe", "Share", "Next post", "Archives"]
FOOTER = ["Privacy Policy | Terms of Use | Cookie Policy", "This site uses cookies to improve your experience.",
          "Copyright 2024 Example Media Inc. All rights reserved.", "Please enable JavaScript to view the comments.",
          "By continuing you agree to our terms of use and privacy policy."]
LOREM = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore."
CODE = "function show(x) {\n  return x + 1;\n}\nvar items = {\"a\": 1, \"b\": 2};"


# -- corpus (parent) -----------------------------------------------------------------------------------


def _paragraph_docs(text: str, target: int = 3000) -> list[str]:
    docs, cur, n = [], [], 0
    for p in text.replace("\r\n", "\n").split("\n\n"):
        if p.strip():
            cur.append(p)
            n += len(p)
            if n >= target:
                docs.append("\n\n".join(cur))
                cur, n = [], 0
    return docs + (["\n\n".join(cur)] if cur else [])


def _webify(doc: str, rng: random.Random) -> str:
    """One or more web page defects around / inside a prose document."""
    sents = re.split(r"(?<=[.!?])\s+", doc.replace("\n", " "))
    kind = rng.choice(["nav", "footer", "bullets", "repeat", "readmore", "hashtags", "citations", "lines",
                       "short", "lorem", "code", "mixed"])
    if kind == "nav":
        return "\n".join(rng.sample(NAV, 6)) + "\n" + doc
    if kind == "footer":
        return doc + "\n" + "\n".join(rng.sample(FOOTER, 3))
    if kind == "bullets":
        return "\n".join(("- " if rng.random() < 0.5 else "• ") + s for s in sents[:rng.randint(5, 40)])
    if kind == "repeat":
        line = rng.choice(sents[:5] or ["Click here to subscribe."])
        return "\n".join(s if rng.random() < 0.6 else line for s in sents)
    if kind == "readmore":
        return "\n".join(s[: rng.randint(20, 80)] + "... Read more..." for s in sents[:30])
    if kind == "hashtags":
        return doc + "\n" + " ".join("#" + w.strip(".,;:!?\"'").lower() for w in sents[0].split()[:40] if w)
    if kind == "citations":
        return "\n".join(s + f" [{rng.randint(1, 99)}]" if rng.random() < 0.4 else s for s in sents)
    if kind == "lines":
        return "\n".join(sents)
    if kind == "short":
        return " ".join(doc.split()[: rng.randint(3, 60)])
    if kind == "lorem":
        return doc + "\n" + LOREM
    if kind == "code":
        return "\n".join(sents[:8]) + "\n" + CODE
    return "\n".join(rng.sample(NAV, 4)) + "\n" + "\n".join(sents) + "\n" + "\n".join(rng.sample(FOOTER, 2))


def build_corpus(quick: bool, web_share: float, seed: int = 0) -> tuple[list[str], list[str]]:
    sys.path.insert(0, str(REPO))
    from mix_assets_tests.support.gen_corpus import MarkovModel, generate_bytes
    from mix_assets_tests.support.shared_data import find_shared_data

    shared = find_shared_data() or REPO.parent / "shared" / "data"
    files = sorted((shared / "sources").rglob("*.txt"))
    if not files:
        raise SystemExit(f"no shared prose under {shared}/sources (set MIX_SHARED_DATA)")
    raw = [f.read_text(errors="replace") for f in files]
    prose = [d for t in raw for d in _paragraph_docs(t)]
    gen = generate_bytes(MarkovModel.from_texts(raw), 1_000_000 if quick else 3_000_000, seed=seed).texts
    prose = random.Random(seed).sample(prose, min(len(prose), 300 if quick else 1200))
    rng = random.Random(seed)
    docs, kinds = [], []
    for origin, d in [("shared", d) for d in prose] + [("generated", d) for d in gen]:
        if rng.random() < web_share:
            docs.append(_webify(d, rng))
            kinds.append(origin + "+web")
        else:
            docs.append(d)
            kinds.append(origin)
    return docs, kinds


# -- children ------------------------------------------------------------------------------------------


def child_ours(path: Path) -> dict:
    sys.path.insert(0, str(REPO))
    import pyarrow as pa

    from mix_assets.stages.filters.cascade import FilterConfig, apply_filters

    texts = pa.array([json.loads(x) for x in path.read_text().splitlines()], pa.large_string())
    out = {}
    for name in FILTERS:
        t0, c0 = time.perf_counter(), time.process_time()
        r = apply_filters(texts, FilterConfig.only(name))
        sec = time.perf_counter() - t0
        out[name] = {"seconds": sec, "cpu_seconds": time.process_time() - c0, "reason": r.filter_reason[name], "python_docs": r.python_docs,
                     "python_seconds": r.seconds.get("gopher_repetition:python_scan", 0.0)}
        if name == "c4":
            out[name]["text"] = r.texts.to_pylist()
    t0, c0 = time.perf_counter(), time.process_time()
    apply_filters(texts, FilterConfig.only(*FILTERS))  # the cascade: shared tokens, C4's rewrite feeds FineWeb
    out["cascade"] = {"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0}
    return out


def child_datatrove(path: Path) -> dict:
    from datatrove.data import Document
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)

    classes = {"gopher_quality": GopherQualityFilter, "gopher_repetition": GopherRepetitionFilter,
               "c4": C4QualityFilter, "fineweb": FineWebQualityFilter}
    texts = [json.loads(x) for x in path.read_text().splitlines()]
    out = {}
    for name in FILTERS:
        f = classes[name]()
        f.filter(Document(text="Warm up the tokenizer. It loads once.", id="w"))
        docs = [Document(text=t, id=str(i)) for i, t in enumerate(texts)]
        t0, c0 = time.perf_counter(), time.process_time()
        res = [f.filter(d) for d in docs]
        sec = time.perf_counter() - t0
        reason = [None if r is True else (r[1] if isinstance(r, tuple) else "dropped") for r in res]
        out[name] = {"seconds": sec, "cpu_seconds": time.process_time() - c0, "reason": reason}
        if name == "c4":
            out[name]["text"] = [d.text for d in docs]
    from importlib.metadata import version
    out["version"] = f"datatrove {version('datatrove')}, spacy {version('spacy')}"
    return out


def _run_child(python: str, which: str, corpus: Path) -> dict:
    res = OUT / f"{which}.json"
    r = subprocess.run([python, __file__, "--child", which, "--corpus", str(corpus), "--result", str(res)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{which} child failed:\n{r.stderr[-3000:]}")
    return json.loads(res.read_text())


def _machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    import os
    return f"{os.cpu_count()} CPUs ({cpu}), load average {open('/proc/loadavg').read().split()[:3]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datatrove-python", default=sys.executable,
                    help="a Python with datatrove==0.10.1 and spacy (default: this one)")
    ap.add_argument("--quick", action="store_true", help="~2 MB instead of ~7 MB")
    ap.add_argument("--web-share", type=float, default=0.35, help="share of documents made web-like")
    ap.add_argument("--reps", type=int, default=1, help="runs of ours (median taken); datatrove runs once")
    ap.add_argument("--child", choices=["ours", "datatrove"], help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        fn = child_ours if args.child == "ours" else child_datatrove
        Path(args.result).write_text(json.dumps(fn(Path(args.corpus))))
        return
    probe = subprocess.run([args.datatrove_python, "-c", "import datatrove, spacy, regex"], capture_output=True, text=True)
    if probe.returncode != 0:
        sys.exit("bench/filters.py needs datatrove to compare against, and "
                 f"{args.datatrove_python} cannot import it ({(probe.stderr.strip().splitlines() or ['?'])[-1]}).\n"
                 "Install the bench extra (pip install -e '.[bench]') or make a separate venv and pass it:\n"
                 "  python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install 'datatrove==0.10.1' "
                 "'spacy==3.8.18' 'regex==2026.11.19'\n"
                 "  python bench/filters.py --datatrove-python /tmp/dtvenv/bin/python")
    OUT.mkdir(parents=True, exist_ok=True)
    docs, kinds = build_corpus(args.quick, args.web_share)
    corpus = OUT / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"machine: {_machine()}")
    print(f"corpus: {len(docs):,} docs, {mb:.2f} MB ({dict(Counter(kinds))})")
    dt = _run_child(args.datatrove_python, "datatrove", corpus)
    ours_runs = [_run_child(sys.executable, "ours", corpus) for _ in range(args.reps)]
    ours = ours_runs[0]
    for name in FILTERS + ("cascade",):
        for k in ("seconds", "cpu_seconds"):
            ours[name][k] = sorted(r[name][k] for r in ours_runs)[len(ours_runs) // 2]
    print(f"{dt['version']} (python {args.datatrove_python})\n")
    print("Wall-clock rates; ratio = datatrove wall s / ours wall s; CPU ratio = the same in process CPU seconds")
    print("(polars may use both cores, datatrove one).\n")
    print("| filter | datatrove docs/s | datatrove MB/s | ours docs/s | ours MB/s | ratio | CPU ratio | agreement "
          "| dt drops | our drops |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    tot_dt = tot_ours = cpu_dt = cpu_ours = 0.0
    dis_out = []
    notes = {}
    for name in FILTERS:
        a, b = dt[name]["reason"], ours[name]["reason"]
        sd, so = dt[name]["seconds"], ours[name]["seconds"]
        tot_dt, tot_ours = tot_dt + sd, tot_ours + so
        cd, co = dt[name]["cpu_seconds"], ours[name]["cpu_seconds"]
        cpu_dt, cpu_ours = cpu_dt + cd, cpu_ours + co
        agree = sum((x is None) == (y is None) for x, y in zip(a, b)) / len(docs)
        print(f"| {name} | {len(docs) / sd:,.0f} | {mb / sd:.2f} | {len(docs) / so:,.0f} | {mb / so:.2f} | "
              f"{sd / so:.1f}x | {cd / co:.1f}x | {100 * agree:.2f} % | {sum(x is not None for x in a):,} | {sum(y is not None for y in b):,} |")
        by = Counter()
        for i, (x, y) in enumerate(zip(a, b)):
            if (x is None) != (y is None):
                by[(x, y)] += 1
                dis_out.append({"filter": name, "doc": i, "kind": kinds[i], "datatrove": x, "ours": y, "text": docs[i][:600]})
        notes[name] = by
    print(f"| all four | {len(docs) / tot_dt:,.0f} | {mb / tot_dt:.2f} | {len(docs) / tot_ours:,.0f} | "
          f"{mb / tot_ours:.2f} | {tot_dt / tot_ours:.1f}x | {cpu_dt / cpu_ours:.1f}x | | | |")
    cas = ours["cascade"]
    print(f"| all four, one apply_filters call | | | {len(docs) / cas['seconds']:,.0f} | {mb / cas['seconds']:.2f} | "
          f"{tot_dt / cas['seconds']:.1f}x | {cpu_dt / cas['cpu_seconds']:.1f}x | | | |")
    rep = ours["gopher_repetition"]
    print(f"\nours: the greedy duplicate n-gram scan ran in Python for {rep['python_docs']:,} of {len(docs):,} "
          f"documents, {rep['python_seconds']:.2f} s of the filter's {rep['seconds']:.2f} s")
    both = [i for i in range(len(docs)) if dt["c4"]["reason"][i] is None and ours["c4"]["reason"][i] is None]
    same = sum(dt["c4"]["text"][i] == ours["c4"]["text"][i] for i in both)
    print(f"C4 rewritten text identical for {same:,} of {len(both):,} documents both keep")
    for name in FILTERS:
        if notes[name]:
            print(f"\ndisagreements {name} (datatrove reason, our reason): count")
            for (x, y), c in notes[name].most_common(12):
                print(f"  {x} / {y}: {c}")
    (OUT / "disagreements.jsonl").write_text("".join(json.dumps(d) + "\n" for d in dis_out))
    drop_dt = {n: Counter(r for r in dt[n]["reason"] if r) for n in FILTERS}
    drop_ours = {n: Counter(r for r in ours[n]["reason"] if r) for n in FILTERS}
    print("\ndrop reasons, datatrove:", json.dumps(drop_dt))
    print("drop reasons, ours:", json.dumps(drop_ours))
    print(f"\nload average at the end: {open('/proc/loadavg').read().split()[:3]}")


if __name__ == "__main__":
    main()
