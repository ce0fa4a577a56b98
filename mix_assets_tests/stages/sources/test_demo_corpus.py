import hashlib
import json

from mix_assets.stages.sources import demo_corpus
from mix_assets.core import textkeys


def _digest(root):
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def test_generation_is_deterministic(tmp_path):
    demo_corpus.generate(tmp_path / "a", seed=5, docs_per_source=40)
    demo_corpus.generate(tmp_path / "b", seed=5, docs_per_source=40)
    demo_corpus.generate(tmp_path / "c", seed=6, docs_per_source=40)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b") != _digest(tmp_path / "c")


def test_ensure_regenerates_only_when_incomplete(tmp_path):
    out = demo_corpus.ensure(tmp_path / "d", seed=5, docs_per_source=30)
    first = (out / "sources" / "math.jsonl").stat().st_mtime_ns
    demo_corpus.ensure(out, seed=5, docs_per_source=30)
    assert (out / "sources" / "math.jsonl").stat().st_mtime_ns == first
    (out / ".complete").unlink()  # as if a generation had been killed before its marker
    demo_corpus.ensure(out, seed=5, docs_per_source=30)
    assert (out / ".complete").exists()


def test_ground_truth_matches_the_files(tmp_path):
    truth = demo_corpus.generate(tmp_path, seed=7, docs_per_source=400)  # the demo's own settings
    texts = {}
    for name in ("encyclopedia", "stories", "math"):
        for i, line in enumerate((tmp_path / "sources" / f"{name}.jsonl").read_text().splitlines()):
            texts[(name, f"{name}.jsonl:{i + 1}")] = json.loads(line)["text"]
    for a, b in truth["exact_dups"]:
        assert texts[tuple(a)] == texts[tuple(b)]
    for nd in truth["near_dups"]:
        a, b = texts[tuple(nd["a"])], texts[tuple(nd["b"])]
        assert a != b and abs(demo_corpus.jaccard(a, b) - nd["jaccard"]) < 1e-3
    val = {json.loads(x)["id"]: json.loads(x) for x in (tmp_path / "evals/demo_qa/validation.jsonl").read_text().splitlines()}
    for c in truth["eval_copies"]:
        q = textkeys.normalise([val[c["item_id"]]["question"]]).to_pylist()[0]
        assert q in textkeys.normalise([texts[(c["source"], c["origin"])]]).to_pylist()[0]
    assert {c["kind"] for c in truth["eval_copies"]} == {"verbatim", "recased_repunctuated"}
    assert (tmp_path / "evals/demo_qa/test.jsonl").exists()
