"""Throughput of stages/filters/langid.identify and core/pii.scrub, and language-id accuracy on real / hand-made text.

    .venv/bin/python bench/langid_pii.py [--mb 10] [--seed 1] [--others] [--max-chars 500,1000,2000]

Corpus: ../mix_assets_tests/support/gen_corpus.py prose (order-2 word Markov chain over the shared books, log-normal lengths,
median ~330 words); for the scrub, one in ten documents gets an email, a public IPv4, a phone and a
near-miss (date, ISBN, price, private IP) spliced in, so the replacement path runs.
Accuracy: 2,000 English paragraphs (>= 200 chars) of the shared State of the Union, Sherlock Holmes
and Gutenberg texts, and the 66 hand-written samples in 22 languages (mix_assets_tests/support/
multilingual.py). `--others` also scores py3langid, langid and pycld2 if they are importable (they are
not project dependencies; install them into a scratch --target to compare).
`--max-chars`: how identifying on each document's first N characters changes decisions, against the
full text, on the shared data cut several ways (paragraph groups of ~2 KB as the shared-sample loader
makes them, of ~8 KB, whole files, GSM8K rows, the hand samples) and on the generated corpus; with
the process CPU seconds of each call (CPU, not wall: the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PLANT = " Contact jane.roe{i}@example.com or +44 20 7946 {i:04d} (server 8.8.{j}.{k}); see ISBN " \
        "978-3-16-148410-0, 2023-10-05, $1,234.56 and 192.168.0.{k}. "


def timed(fn, *a, **k):
    t = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t


def english_paragraphs(data: Path, n: int = 2000) -> list[str]:
    paths = sorted([*data.glob("sources/nltk_state_union/*.txt"), *data.glob("sources/sherlock_holmes/*.txt"),
                    *data.glob("sources/gutenberg/*.txt")])
    paras = []
    for p in paths:
        t = p.read_bytes().decode("utf-8", "replace").lstrip("\ufeff").replace("\r\n", "\n")
        paras += [x for x in re.split(r"\n\s*\n", t) if len(x) >= 200]
    random.Random(0).shuffle(paras)
    return paras[:n]


def paragraph_groups(text: str, target: int) -> list[str]:
    out, cur, n = [], [], 0
    for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        if p.strip():
            cur.append(p)
            n += len(p)
            if n >= target:
                out.append("\n\n".join(cur))
                cur, n = [], 0
    return out + (["\n\n".join(cur)] if cur else [])


def shared_sets(data: Path, samples: dict) -> dict:
    raw = [p.read_bytes().decode("utf-8", "replace") for p in sorted((data / "sources").rglob("*.txt"))]
    rows = [json.loads(x) for p in sorted((data / "sources").rglob("*.jsonl")) for x in p.read_text().splitlines()]
    return {"shared, paragraph groups ~2 KB": [g for t in raw for g in paragraph_groups(t, 2000)],
            "shared, paragraph groups ~8 KB": [g for t in raw for g in paragraph_groups(t, 8000)],
            "shared, whole files": raw,
            "shared, GSM8K rows": [f"Question: {r['question']}\nAnswer: {r['answer']}" for r in rows if "question" in r],
            "hand samples, 22 languages": [t for ts in samples.values() for t in ts]}


def truncation(sets: dict, values: list[int]) -> None:
    from mix_assets.stages.filters import langid

    print(f"\n--max-chars: decisions on the first N characters vs the full text (load average "
          f"{os.getloadavg()[0]:.1f}); keep = top language en and score > 0.65")
    print("| documents | N | docs | MB | CPU s | docs/s (CPU) | speed-up | top-1 same | keep same | keep differs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    total = Counter()
    for name, texts in sets.items():
        mb = sum(len(t.encode()) for t in texts) / 1e6
        c = time.process_time()
        full, fs = langid.identify(texts)
        c_full = time.process_time() - c
        keep = [x == "en" and y > 0.65 for x, y in zip(full, fs)]
        print(f"| {name} | full | {len(texts):,} | {mb:.2f} | {c_full:.2f} | {len(texts) / c_full:,.0f} | | | | |")
        for n in values:
            c = time.process_time()
            head, hs = langid.identify(texts, max_chars=n)
            c_head = time.process_time() - c
            k = [x == "en" and y > 0.65 for x, y in zip(head, hs)]
            diff = [i for i in range(len(texts)) if k[i] != keep[i]]
            total[n, "docs"] += len(texts)
            total[n, "diff"] += len(diff)
            print(f"| | {n:,} | | | {c_head:.2f} | {len(texts) / c_head:,.0f} | {c_full / c_head:.1f}x | "
                  f"{sum(a == b for a, b in zip(full, head)) / len(texts):.2%} | "
                  f"{1 - len(diff) / len(texts):.2%} | {len(diff)} |")
            for i in diff:
                print(f"  differs: full {full[i]} {fs[i]:.3f}, head {head[i]} {hs[i]:.3f}, {len(texts[i]):,} chars: "
                      f"{texts[i][:70]!r}")
    for n in values:
        print(f"N={n:,}: keep decisions agree on {total[n, 'docs'] - total[n, 'diff']:,} of {total[n, 'docs']:,} "
              f"documents ({1 - total[n, 'diff'] / total[n, 'docs']:.3%})")


def others():
    out = {}
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
        m = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        out["py3langid"] = lambda ts: [m.classify(t) for t in ts]
    except ImportError:
        pass
    try:
        import langid.langid as lg
        m2 = lg.LanguageIdentifier.from_modelstring(lg.model, norm_probs=True)
        out["langid"] = lambda ts: [m2.classify(t) for t in ts]
    except ImportError:
        pass
    try:
        import pycld2
        out["pycld2"] = lambda ts: [(r[2][0][1], r[2][0][2] / 100) for r in map(pycld2.detect, ts)]
    except ImportError:
        pass
    return out


def accuracy(name, fn, english, samples):
    langs, scores = zip(*fn(english))
    en_top = sum(x == "en" for x in langs) / len(langs)
    en_65 = sum(x == "en" and s > 0.65 for x, s in zip(langs, scores)) / len(langs)
    texts = [t for ts in samples.values() for t in ts]
    want = [k for k, ts in samples.items() for _ in ts]
    got = [{"zh-Hant": "zh", "zh-Hans": "zh"}.get(x, x) for x, _ in fn(texts)]
    wrong = [f"{w}[{i % 3}]->{g}" for i, (w, g) in enumerate(zip(want, got)) if w != g]
    print(f"{name:10s} English top-1 {en_top:.2%}, English > 0.65 {en_65:.2%} (n={len(english)}); "
          f"hand samples {len(texts) - len(wrong)}/{len(texts)} {' '.join(wrong)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--others", action="store_true")
    ap.add_argument("--max-chars", default="", help="comma-separated head lengths to compare with the full text")
    args = ap.parse_args()

    from mix_assets_tests.support import gen_corpus as gc
    from mix_assets.stages.filters import langid
    from mix_assets.core import pii
    from mix_assets_tests.support.multilingual import SAMPLES
    from mix_assets_tests.support.shared_data import FIXTURE, find_shared_data

    data = find_shared_data() or FIXTURE
    books = sorted(p for n in ("gutenberg", "sherlock_holmes", "botchan", "nltk_state_union")
                   for p in (data / "sources" / n).glob("*.txt"))
    texts = gc.generate_bytes(gc.MarkovModel.from_files(books), int(args.mb * 1e6), seed=args.seed).texts
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"corpus: {len(texts):,} generated docs, {mb:.1f} MB; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs; model {langid.model_info()}")

    langid.identify(["warm up"])
    c = time.process_time()
    (full, _), t_full = timed(langid.identify, texts)
    c_full, c = time.process_time() - c, time.process_time()
    (head, _), t_head = timed(langid.identify, texts, max_chars=2000)
    c_head = time.process_time() - c
    same = sum(a == b for a, b in zip(full, head)) / len(texts)
    for what, t, cpu in (("identify (full text)", t_full, c_full), ("identify (max_chars=2000)", t_head, c_head)):
        print(f"{what:28s} {len(texts) / t:8,.0f} docs/s {mb / t:6.2f} MB/s ({t:.1f} s wall, {cpu:.1f} s CPU: "
              f"{len(texts) / cpu:,.0f} docs/s {mb / cpu:.2f} MB/s per CPU second)")
    print(f"  top-1 'en' {sum(x == 'en' for x in full) / len(full):.2%}; max_chars=2000 agrees on {same:.2%}")

    planted = [t + PLANT.format(i=i, j=i % 200, k=i % 250 + 1) if i % 10 == 0 else t
               for i, t in enumerate(texts)]
    pmb = sum(len(t.encode()) for t in planted) / 1e6
    (out, counts), t_scrub = timed(pii.scrub, planted)
    n_plant = len(range(0, len(texts), 10))
    totals = {c: sum(counts.column(c).to_pylist()) for c in counts.column_names}
    kept = sum("ISBN 978-3-16-148410-0, 2023-10-05, $1,234.56 and 192.168.0." in t for t in out.to_pylist())
    print(f"{'scrub (4 rules)':28s} {len(texts) / t_scrub:8,.0f} docs/s {pmb / t_scrub:6.2f} MB/s ({t_scrub:.1f} s)")
    print(f"  redactions {totals} for {n_plant} planted docs (1 email, 1 IPv4, 1 phone each); "
          f"near-misses intact in {kept}/{n_plant}")

    if args.max_chars:
        truncation({**shared_sets(data, SAMPLES), "generated (the corpus above)": texts},
                   [int(x) for x in args.max_chars.split(",")])
    english = english_paragraphs(data)
    accuracy("fastText", lambda ts: list(zip(*langid.identify(ts))), english, SAMPLES)
    if args.others:
        for name, fn in others().items():
            accuracy(name, fn, english, SAMPLES)


if __name__ == "__main__":
    main()
