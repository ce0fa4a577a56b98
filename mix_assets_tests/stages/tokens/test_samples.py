"""stages/tokens/samples.py: the rendered samples are what the trainer reads, seams marked, draw renewed per build, scrubbed."""

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer

from mix_assets.stages.audit import contamination as ct
from mix_assets.core import layout
from mix_assets.stages.tokens import samples
from mix_assets.stages.audit.eval_scan import scrub_hashes
from mix_assets.stages.manifest.builder import write_manifest
from mix_assets.stages.tokens.shards import build_token_shards
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.stages.tokens.tokenizer import build_tokenizer
from mix_assets.reader import open_mix
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec

SEP_TEXT = "<|endoftext|>"
_BLOCK = re.compile(r"\*\*(train|val) sample ([\d,]+)\*\*[^\n]*\n\n(`{3,})text\n(.*?)\n\3", re.S)
# the tiny eval task's item 3 (tokens_spec.tiny_eval_task): none of its words occur in the sources
ITEM = "which numbered quartz beacon 3 guides zebra pilots across the frozen delta toward marker 21 before dusk tonight"


def _build(root: Path, upstream_seed: int = 1):
    spec = tiny_spec(root, packing={"separator": SEP_TEXT, "seq_len": 48})
    st = write_upstream(root, {s.name: 300 for s in spec.sources}, seed=upstream_seed)
    build_validation_split(st, [s.name for s in spec.sources], spec.seed, spec.split.val_fraction)
    build_tokenizer(st, spec)
    build_token_shards(st, spec)
    write_manifest(st, name=spec.name, seed=spec.seed, spec_dump=spec.model_dump(mode="json"))
    return spec, st


def _render(spec, st) -> samples.Rendered:
    return samples.rendered_samples(st, spec, st.sha256(layout.SHARD_STATS))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    spec, st = _build(tmp_path_factory.mktemp("samples"))
    return spec, st, _render(spec, st)


def _blocks(md: str) -> list[tuple[str, int, str]]:
    return [(m.group(1), int(m.group(2).replace(",", "")), m.group(4)) for m in _BLOCK.finditer(md)]


_LABEL = re.compile(r"\n?⟦([^⟧\n]+) · ([^⟧\n]+?)( \(continued\))?⟧\n")


def _unrendered(body: str) -> str:
    """The shown text back to the decoded text: document labels dropped, separators and escaped control
    characters restored."""
    body = _LABEL.sub("", body)
    body = re.sub(r"⟦U\+([0-9A-F]{4,6})⟧", lambda m: chr(int(m.group(1), 16)), body)
    return body.replace(samples.SEP, SEP_TEXT)


def test_rendering_is_what_the_reader_serves_decoded(built, tmp_path):
    spec, st, r = built
    md = st.read_text(layout.RENDERED_SAMPLES)
    assert md == r.markdown and r.samples == 30 and r.withheld_samples == 0
    # the UI copy is the file's text with long lines broken (code blocks do not wrap in the UI)
    assert [(a, b, c.replace(samples.WRAP_MARK + "\n", "")) for a, b, c in _blocks(r.ui_markdown)] == _blocks(md)
    assert all(len(line) <= samples.WRAP + 1 for b in _blocks(r.ui_markdown) for line in b[2].split("\n"))
    blocks = _blocks(md)
    assert len(blocks) == 30 and {b[0] for b in blocks} == {"train", "val"}
    assert sum(b[0] == "val" for b in blocks) == 30 // samples.VAL_PART
    mix = Path(st.root) / layout.MIX_DIR
    tok = Tokenizer.from_file(str(mix / "tokenizer" / "tokenizer.json"))
    for split in ("train", "val"):
        reader = open_mix(str(mix), cache_dir=str(tmp_path / "cache"), split=split, shuffle=False)
        for sp, index, body in blocks:
            if sp == split:
                ids = reader.sample(index).tolist()
                assert len(ids) == reader.sample_len
                assert _unrendered(body) == tok.decode(ids, skip_special_tokens=False), (split, index)


def test_seams_are_marked_where_a_document_starts(built):
    spec, st, r = built
    sep_id = json.loads(st.read_text(layout.SHARD_STATS))["packing"]["separator_id"]
    heads = re.findall(r"\*\*(?:train|val) sample [\d,]+\*\*[^\n]*", r.markdown)
    bodies = [b[2] for b in _blocks(r.markdown)]
    assert sum(b.count(samples.SEP) for b in bodies) > 0  # ~100-word documents in 48-token samples
    for head, body in zip(heads, bodies):
        n = int(re.search(r"(\d+) seam\(s\)", head).group(1))
        # every separator but one in the last position starts a document inside the sample
        assert body.count(samples.SEP) in (n, n + 1), head
        assert "seams not marked" not in head
    s = samples.Sample("train", 0, "train/x.bin", 0, np.array([5, sep_id, 6, 7, sep_id]), "", [])
    assert s.seams(sep_id) == [2] and s.seams(None) == []


def test_same_build_same_draw_changed_data_new_draw(built, tmp_path):
    spec, st, r = built
    again = _build(tmp_path / "same")
    assert _render(*again).markdown == r.markdown  # same inputs: same build, same samples
    other = _build(tmp_path / "other", upstream_seed=2)  # other documents: another build, another draw
    assert other[1].sha256(layout.SHARD_STATS) != st.sha256(layout.SHARD_STATS)
    picked = [(b[0], b[1]) for b in _blocks(r.markdown)]
    assert [(b[0], b[1]) for b in _blocks(_render(*other).markdown)] != picked
    assert samples.draw_seed(spec.seed, "a" * 64) == samples.draw_seed(spec.seed, "a" * 64)
    assert samples.draw_seed(spec.seed, "a" * 64) != samples.draw_seed(spec.seed + 1, "a" * 64)


def test_draw_shares_and_bounds():
    d = samples.draw({"train": 1000, "val": 50}, seed=7)
    assert len(d["train"]) == 24 and len(d["val"]) == 6
    assert d == samples.draw({"train": 1000, "val": 50}, seed=7) != samples.draw({"train": 1000, "val": 50}, seed=8)
    assert all(0 <= i < 1000 for i in d["train"]) and len(set(d["train"])) == 24
    small = samples.draw({"train": 10, "val": 2}, seed=1)
    assert small == {"train": list(range(10)), "val": [0, 1]}
    assert samples.draw({"train": 100, "val": 2}, seed=1)["train"].__len__() == 28  # val's shortfall goes to train
    assert len(samples.draw({"train": 100, "val": 1}, seed=1, n=3)["val"]) == 1  # val shown even in a small draw


def test_planted_eval_sentence_is_masked(built):
    spec, st, _ = built
    scrub, k = scrub_hashes(spec), spec.audit.scrub_words
    tok = Tokenizer.from_file(st.local_path(layout.TOKENIZER_FILE))
    sep_id = tok.token_to_id(SEP_TEXT)
    text = f"the river ran on. {ITEM.capitalize()}, said the paper"
    ids = np.array(tok.encode(text).ids + [sep_id] + tok.encode("stone garden").ids, np.uint16)
    s = samples.decode(tok, "train", 4, "train/train-00000.bin", 4, ids, sep_id)
    stats = {"packing": {"separator": SEP_TEXT, "separator_id": sep_id, "sample_len": len(ids), "seq_len": len(ids)},
             "splits": {"train": {"samples": 9}, "val": {"samples": 1}}}
    out = samples.render([s], stats, "b" * 64, 1, scrub, k)
    assert ct.leaking_strings([s.text], scrub, k) == [0]  # the sample does hold the item
    assert ct.leaking_strings([out.markdown], scrub, k) == []
    assert out.scrubbed_words == 18 and "⟦scrubbed 18 words⟧ said the paper" in out.markdown
    assert "the river ran on. ⟦scrubbed" in out.markdown and f"{samples.SEP}stone garden" in out.markdown


def test_scrub_text_keeps_the_rest_and_covers_punctuation():
    scrub = ct.scrub_ngrams([ITEM], 8)
    assert samples.scrub_text("nothing to see here at all in this text today", scrub, 8)[1] == 0
    got, n = samples.scrub_text(f"A: {ITEM.replace(' the ', ' — the ')}!\nB: ok", scrub, 8)
    assert (got, n) == ("A: ⟦scrubbed 18 words⟧\nB: ok", 18)
    part = " ".join(ITEM.split()[2:10])  # exactly 8 words of the item
    assert samples.scrub_text(f"x {part} y", scrub, 8) == ("x ⟦scrubbed 8 words⟧ y", 8)
    assert samples.scrub_text(" ".join(ITEM.split()[2:9]), scrub, 8)[1] == 0  # 7 words are not a leak


def test_a_sample_still_leaking_after_masking_is_withheld(monkeypatch):
    scrub = ct.scrub_ngrams([ITEM], 8)
    monkeypatch.setattr(samples, "scrub_text", lambda text, scrub, k: (text, 0))  # a broken masker
    s = samples.Sample("val", 0, "val/val-00000.bin", 0, np.zeros(4, np.uint16), ITEM, [ITEM])
    stats = {"packing": {"separator": None, "separator_id": None, "sample_len": 4, "seq_len": 4},
             "splits": {"train": {"samples": 1}, "val": {"samples": 1}}}
    out = samples.render([s], stats, "c" * 64, 1, scrub, 8)
    assert out.withheld_samples == 1 and ct.leaking_strings([out.markdown], scrub, 8) == []


def test_control_characters_are_visible_and_fences_hold():
    assert samples.visible("a\x00b\u200bc\n\td") == "a⟦U+0000⟧b⟦U+200B⟧c\n\td"
    s = samples.Sample("train", 0, "t.bin", 0, np.zeros(2, np.uint16), "x ``` y", ["x ``` y"])
    stats = {"packing": {"separator": None, "separator_id": None, "sample_len": 2, "seq_len": 2},
             "splits": {"train": {"samples": 1}, "val": {"samples": 0}}}
    md = samples.render([s], stats, "d" * 64, 1, np.zeros(0, np.uint64), 8).markdown
    assert "````text\nx ``` y\n````" in md
    assert "seams unknown (no separator)" in md and "No separator is configured" in md


def test_ui_copy_is_elided_when_large(monkeypatch):
    monkeypatch.setattr(samples, "UI_CHARS", 2000)
    big = "word " * 2000
    s = samples.Sample("train", 0, "t.bin", 0, np.zeros(2, np.uint16), big, [big])
    stats = {"packing": {"separator": None, "separator_id": None, "sample_len": 2, "seq_len": 2},
             "splits": {"train": {"samples": 1}, "val": {"samples": 0}}}
    out = samples.render([s], stats, "e" * 64, 1, np.zeros(0, np.uint64), 8)
    assert big in out.markdown and len(out.ui_markdown) < 2600 and "characters elided" in out.ui_markdown


def test_every_segment_is_labelled_with_its_source_and_document(built):
    """Each segment opens with `⟦source · doc_id⟧`: the document the packer put there (its raw text starts
    with the segment's text, or holds it when the document began in an earlier sample)."""
    spec, st, r = built
    raw = {}
    for s in spec.sources:
        t = pq.read_table(st.local_path(layout.RAW_DOCS.format(source=s.name)), columns=["doc_id", "text"])
        raw |= {d: (s.name, x) for d, x in zip(t.column("doc_id").to_pylist(), t.column("text").to_pylist())}
    labelled = 0
    for _, _, body in _blocks(r.markdown):
        segs = body.split(samples.SEP)
        for i, seg in enumerate(segs):
            if not seg:
                continue
            m = _LABEL.match(seg)
            assert m, seg[:80]
            src, doc, cont = m.group(1), m.group(2), bool(m.group(3))
            assert raw[doc][0] == src and (not cont or i == 0)  # only the first can begin in an earlier sample
            text = seg[m.end():]
            head = text[:20] if i < len(segs) - 1 or len(text) > 20 else text[:-2]  # a cut last token
            assert (head in raw[doc][1]) if cont else raw[doc][1].startswith(head), (doc, text[:40])
            labelled += 1
    assert labelled > 30
