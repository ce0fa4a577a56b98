"""Throughput of lib/langid.identify and lib/pii.scrub, and language-id accuracy on real / hand-made text.

    .venv/bin/python bench/langid_pii.py [--mb 10] [--seed 1] [--others]

Corpus: lib/gen_corpus.py prose (order-2 word Markov chain over the shared books, log-normal lengths,
median ~330 words); for the scrub, one in ten documents gets an email, a public IPv4, a phone and a
near-miss (date, ISBN, price, private IP) spliced in, so the replacement path runs.
Accuracy: 2,000 English paragraphs (>= 200 chars) of the shared State of the Union, Sherlock Holmes
and Gutenberg texts, and the 66 hand-written samples in 22 languages (mix_assets_tests/support/
multilingual.py). `--others` also scores py3langid, langid and pycld2 if they are importable (they are
not project dependencies; install them into a scratch --target to compare).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
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
    args = ap.parse_args()

    from mix_assets.lib import gen_corpus as gc
    from mix_assets.lib import langid, pii
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
    (full, _), t_full = timed(langid.identify, texts)
    (head, _), t_head = timed(langid.identify, texts, max_chars=2000)
    same = sum(a == b for a, b in zip(full, head)) / len(texts)
    for what, t in (("identify (full text)", t_full), ("identify (max_chars=2000)", t_head)):
        print(f"{what:28s} {len(texts) / t:8,.0f} docs/s {mb / t:6.2f} MB/s ({t:.1f} s)")
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

    english = english_paragraphs(data)
    accuracy("fastText", lambda ts: list(zip(*langid.identify(ts))), english, SAMPLES)
    if args.others:
        for name, fn in others().items():
            accuracy(name, fn, english, SAMPLES)


if __name__ == "__main__":
    main()
