"""Benchmark: the quality classifier (stages/quality) beside datatrove's fastText filter and fastText's C++ trainer.

1. Training on ~`--mb` MB of labelled text: positives are paragraphs of the shared prose (>= 200 chars), negatives
   the same paragraphs with their words shuffled (seeded): the same vocabulary, only the order tells them apart
   (bigrams). A seeded 20 % of the paragraphs is held out BEFORE the rest is repeated up to `--mb` MB (the prose is
   ~7 MB: the training text repeats it), so no held-out paragraph is ever trained on. Ours is
   `classifier.train_model` (fasttext-new, thread=1); the peer is fastText's C++ `train_supervised`
   (fasttext-numpy2-wheel, thread=1) on the same file with the same hyper-parameters, in the datatrove venv.
   Printed: seconds (wall and CPU), the held-out ROC-AUC of both models.
2. Scoring `--score-mb` MB of documents (the held-out ones first) with OUR model: `scoring.score` (the compiled
   predict, stages/quality/predict.py, one thread) and `scoring.score_cpp` (the C++ predict per text) beside datatrove 0.10.1's
   `FastTextClassifierFilter` (one `filter(doc)` per Document, its defaults: newline_replacement "",
   labels saved in metadata), each in a child process of its own Python: docs/s, wall and CPU seconds, the
   ratio, and how many scores are identical (float equality).

datatrove runs in its own venv (fasttext-numpy2-wheel's `fasttext` module clashes with fasttext-predict's):
  python3 -m venv /tmp/q30dtvenv && /tmp/q30dtvenv/bin/pip install 'datatrove==0.10.1' \\
      'fasttext-numpy2-wheel==0.9.2' fasteners 'regex==2026.11.19'
  PYTHONPATH=$PWD .venv/bin/python bench/quality.py --datatrove-python /tmp/q30dtvenv/bin/python --mb 100
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HYPER = {"epoch": 5, "lr": 0.1, "dim": 64, "word_ngrams": 2, "min_count": 1, "bucket": 200_000, "seed": 0}


def _paragraphs(data: Path) -> list[str]:
    out = []
    for p in sorted((data / "sources").rglob("*.txt")):
        if "gsm8k" in str(p):
            continue
        t = p.read_bytes().decode("utf-8", "replace").replace("\r\n", "\n")
        out += [x.strip() for x in t.split("\n\n") if len(x.strip()) >= 200]
    return sorted(set(out))


def _held(text: str) -> bool:
    return int(hashlib.sha256(b"held:" + text.encode()).hexdigest()[:8], 16) / 2 ** 32 < 0.2


def _labelled(data: Path, mb: float):
    from mix_assets.stages.quality import classifier, scoring

    paras = _paragraphs(data)
    rng = random.Random(0)
    pos, neg = [], []
    for x in paras:
        w = x.split()
        rng.shuffle(w)
        pos.append(x)
        neg.append(" ".join(w))
    held = [_held(x) for x in paras]
    train_pos = [x for x, h in zip(pos, held) if not h]
    train_neg = [x for x, h in zip(neg, held) if not h]
    texts, labels, size, rep = [], [], 0, 0
    while size < mb * 1e6:
        for a, b in zip(train_pos, train_neg):
            texts += [a, b]
            labels += [1, 0]
            size += len(a.encode()) + len(b.encode())
        rep += 1
    held_texts = [x for x, h in zip(pos, held) if h] + [x for x, h in zip(neg, held) if h]
    held_labels = np.array([1] * sum(held) + [0] * sum(held), np.int8)
    prepared = scoring.prepared(texts, " ", None)
    n = len(prepared)
    train = classifier.Labelled([f"t{i}" for i in range(n)], prepared, np.array(labels, np.int8),
                                np.zeros(n, bool), ["bench"] * n)
    return train, held_texts, held_labels, size, rep, len(paras)


def _training_file(train, path: Path) -> None:
    """The file classifier.train_model writes (same order: its seeded draw over the ids)."""
    from mix_assets.stages.quality import classifier

    order = np.argsort(classifier._unit(HYPER["seed"], "order", train.doc_ids), kind="stable")
    with open(path, "w", encoding="utf-8") as f:
        for i in order:
            f.write(f"{classifier.POS if train.labels[i] else classifier.NEG} {train.texts[i]}\n")


# -- children -------------------------------------------------------------------------------------------------
def child_score_ours(model: str, texts: Path, out: Path) -> dict:
    from mix_assets.stages.quality import scoring

    docs = json.loads(texts.read_text())
    sha = scoring.file_sha256(model)
    scoring.score(["warm up"], model, sha, "__label__hq", "", None)
    t0, c0 = time.perf_counter(), time.process_time()
    s = scoring.score(docs, model, sha, "__label__hq", "", None)
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.save(out, s)
    return {"seconds": sec, "cpu_seconds": cpu}


def child_score_cpp(model: str, texts: Path, out: Path) -> dict:
    """The same texts through fasttext-predict's C++ predict, one call per text (the stage's scorer before
    stages/quality/predict.py; still its scorer for models the compiled pass does not cover)."""
    from mix_assets.stages.quality import scoring

    docs = json.loads(texts.read_text())
    sha = scoring.file_sha256(model)
    scoring.score_cpp(["warm up"], model, sha, "__label__hq", "", None)
    t0, c0 = time.perf_counter(), time.process_time()
    s = scoring.score_cpp(docs, model, sha, "__label__hq", "", None)
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.save(out, s)
    return {"seconds": sec, "cpu_seconds": cpu}


def child_score_rust(model: str, texts: Path, out: Path) -> dict:
    """The same texts through fasttext-new's predict (Rust; one call per text, k=-1): not the stage's scorer."""
    import fasttext_new

    from mix_assets.stages.quality import scoring

    docs = json.loads(texts.read_text())
    m = fasttext_new.load_model(model)
    m.predict("warm up", k=-1)
    t0, c0 = time.perf_counter(), time.process_time()
    lines = scoring.prepared(docs, "", None)
    s = np.zeros(len(lines), np.float64)
    for i, t in enumerate(lines):
        labels, probs = m.predict(t, k=-1)
        s[i] = dict(zip(labels, probs)).get("__label__hq", 0.0)
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.save(out, s)
    return {"seconds": sec, "cpu_seconds": cpu}


def child_score_datatrove(model: str, texts: Path, out: Path) -> dict:
    from datatrove.data import Document
    from datatrove.pipeline.filters import FastTextClassifierFilter

    docs = json.loads(texts.read_text())
    f = FastTextClassifierFilter(model, keep_labels=("hq", 0.5))
    f.filter(Document(text="warm up", id="w"))
    ds = [Document(text=t, id=str(i)) for i, t in enumerate(docs)]
    t0, c0 = time.perf_counter(), time.process_time()
    for d in ds:
        f.filter(d)
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.save(out, np.array([d.metadata.get("__label__hq", 0.0) for d in ds], np.float64))
    from importlib.metadata import version
    return {"seconds": sec, "cpu_seconds": cpu, "version": f"datatrove {version('datatrove')}"}


def child_train_cpp(train_file: Path, out: Path) -> dict:
    import fasttext

    h = HYPER
    t0, c0 = time.perf_counter(), time.process_time()
    m = fasttext.train_supervised(input=str(train_file), epoch=h["epoch"], lr=h["lr"], dim=h["dim"],
                                  wordNgrams=h["word_ngrams"], minCount=h["min_count"], bucket=h["bucket"], thread=1,
                                  seed=h["seed"], verbose=0)
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    m.save_model(str(out))
    from importlib.metadata import version
    return {"seconds": sec, "cpu_seconds": cpu, "version": f"fasttext-numpy2-wheel {version('fasttext-numpy2-wheel')}"}


def _child(python: str, which: str, *args) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        res = f.name
    r = subprocess.run([python, __file__, "--child", which, *map(str, args), "--result", res], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if r.returncode != 0:
        raise SystemExit(f"{which} child failed:\n{r.stderr[-3000:]}")
    return json.loads(Path(res).read_text())


def _machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return f"{os.cpu_count()} CPUs ({cpu}), load average {open('/proc/loadavg').read().split()[:3]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datatrove-python", default=sys.executable,
                    help="a Python with datatrove==0.10.1 and fasttext-numpy2-wheel (default: this one)")
    ap.add_argument("--data", help="the shared data folder (default: mix_assets_tests/support/shared_data's rule)")
    ap.add_argument("--mb", type=float, default=100.0, help="MB of labelled training text")
    ap.add_argument("--score-mb", type=float, default=20.0,
                    help="MB of documents scored: the held-out ones, then training documents up to this size")
    ap.add_argument("--work", help="a folder for the model files (default: a temp folder)")
    ap.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        which, *rest = args.child
        fn = {"ours": child_score_ours, "cpp": child_score_cpp, "rust": child_score_rust, "datatrove": child_score_datatrove, "train_cpp": child_train_cpp}[which]
        Path(args.result).write_text(json.dumps(fn(*map(Path, rest)) if which == "train_cpp"
                                                else fn(rest[0], Path(rest[1]), Path(rest[2]))))
        return
    probe = subprocess.run([args.datatrove_python, "-c", "import datatrove, fasttext; fasttext.train_supervised"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        sys.exit(f"bench/quality.py needs datatrove and fastText's trainer in {args.datatrove_python} "
                 f"({(probe.stderr.strip().splitlines() or ['?'])[-1]}); see this file's docstring for the venv")
    from mix_assets.stages.quality import classifier, scoring
    from mix_assets.stages.quality.config import QualityTraining
    from mix_assets_tests.support.shared_data import find_shared_data

    data = Path(args.data) if args.data else find_shared_data()
    if data is None:
        sys.exit("bench/quality.py needs the shared data folder (--data or MIX_SHARED_DATA)")
    work = Path(args.work or tempfile.mkdtemp(prefix="quality-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"host: {_machine()} (loaded by other jobs: compare ratios, CPU seconds beside wall)")
    train, held_texts, held_labels, size, rep, n_paras = _labelled(data, args.mb)
    print(f"labelled text: {size / 1e6:.1f} MB ({len(train.texts):,} documents: {n_paras:,} paragraphs of the "
          f"shared prose and their word-shuffled copies, the training part repeated {rep}x); held out: "
          f"{len(held_texts):,} documents never trained on")
    spec = QualityTraining(positives=["bench"], **HYPER)
    t0, c0 = time.perf_counter(), time.process_time()
    model = classifier.train_model(train, spec, 0)
    ours_train = (time.perf_counter() - t0, time.process_time() - c0)
    ours_model = work / "ours.bin"
    ours_model.write_bytes(model)
    again = classifier.train_model(train, spec, 0) if os.environ.get("QUALITY_BENCH_REBUILD") else None
    train_file = work / "train.txt"
    _training_file(train, train_file)
    cpp = _child(args.datatrove_python, "train_cpp", train_file, work / "cpp.bin")
    sha = scoring.file_sha256(str(ours_model))
    auc_ours = classifier.roc_auc(scoring.score(held_texts, str(ours_model), sha, "__label__hq"), held_labels)
    cpp_sha = scoring.file_sha256(str(work / "cpp.bin"))
    auc_cpp = classifier.roc_auc(scoring.score(held_texts, str(work / "cpp.bin"), cpp_sha, "__label__hq"), held_labels)
    print(f"\n## training ({json.dumps(HYPER)}, thread=1)")
    print("| trainer | wall s | CPU s | held-out ROC-AUC | model MB |\n|---|---|---|---|---|")
    print(f"| ours: fasttext-new (classifier.train_model) | {ours_train[0]:.1f} | {ours_train[1]:.1f} | "
          f"{auc_ours:.4f} | {len(model) / 1e6:.1f} |")
    print(f"| peer: {cpp['version']} train_supervised | {cpp['seconds']:.1f} | {cpp['cpu_seconds']:.1f} | "
          f"{auc_cpp:.4f} | {(work / 'cpp.bin').stat().st_size / 1e6:.1f} |")
    print(f"ratio ours/peer: wall {ours_train[0] / cpp['seconds']:.2f}, CPU {ours_train[1] / cpp['cpu_seconds']:.2f}")
    if again is not None:
        print(f"rebuild byte-identical: {again == model}")

    scored, size_scored = list(held_texts), sum(len(t.encode()) for t in held_texts)
    for t in train.texts:  # throughput only: which documents does not matter, only that both score the same
        if size_scored >= args.score_mb * 1e6:
            break
        scored.append(t)
        size_scored += len(t.encode())
    texts = work / "scored.json"
    texts.write_text(json.dumps(scored))
    ours = _child(sys.executable, "ours", ours_model, texts, work / "ours_scores.npy")
    dt = _child(args.datatrove_python, "datatrove", ours_model, texts, work / "dt_scores.npy")
    rust = _child(sys.executable, "rust", ours_model, texts, work / "rust_scores.npy")
    cpp = _child(sys.executable, "cpp", ours_model, texts, work / "cpp_scores.npy")
    a, b = np.load(work / "ours_scores.npy"), np.load(work / "dt_scores.npy")
    c = np.load(work / "cpp_scores.npy")
    r = np.load(work / "rust_scores.npy")
    mb, n = size_scored / 1e6, len(scored)
    print(f"\n## scoring {n:,} documents ({mb:.1f} MB: the {len(held_texts):,} held out, then training documents) "
          "with our model")
    print("| scorer | docs/s | wall s | CPU s |\n|---|---|---|---|")
    print(f"| ours: stages/quality/scoring.score (compiled predict, 1 thread) | {n / ours['seconds']:,.0f} | "
          f"{ours['seconds']:.2f} | {ours['cpu_seconds']:.2f} |")
    print(f"| (the stage's fallback) scoring.score_cpp: C++ predict per text | {n / cpp['seconds']:,.0f} | "
          f"{cpp['seconds']:.2f} | {cpp['cpu_seconds']:.2f} |")
    print(f"| (not the stage's) fasttext-new predict per text | {n / rust['seconds']:,.0f} | {rust['seconds']:.2f} | "
          f"{rust['cpu_seconds']:.2f} |")
    print(f"| peer: {dt['version']} FastTextClassifierFilter | {n / dt['seconds']:,.0f} | {dt['seconds']:.2f} | "
          f"{dt['cpu_seconds']:.2f} |")
    print(f"throughput ratio ours/datatrove: wall {dt['seconds'] / ours['seconds']:.2f}x, "
          f"CPU {dt['cpu_seconds'] / ours['cpu_seconds']:.2f}x")
    print(f"identical scores: {int((a == b).sum()):,} of {n:,} (max |diff| {float(np.abs(a - b).max()):.3g})")
    print(f"C++ predict per text beside datatrove: wall {dt['seconds'] / cpp['seconds']:.2f}x, CPU "
          f"{dt['cpu_seconds'] / cpp['cpu_seconds']:.2f}x; identical scores {int((c == b).sum()):,} of {n:,}")
    print(f"fasttext-new beside datatrove: wall {dt['seconds'] / rust['seconds']:.2f}x, CPU "
          f"{dt['cpu_seconds'] / rust['cpu_seconds']:.2f}x; identical scores {int((r == b).sum()):,} of {n:,} "
          f"(max |diff| {float(np.abs(r - b).max()):.3g})")


if __name__ == "__main__":
    main()
