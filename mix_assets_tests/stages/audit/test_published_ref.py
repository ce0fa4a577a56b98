"""The published audit's scanner against the one it replaced (mix_assets_tests/oracles/published_audit_ref.py):
every tally equal, hits per sample included, on small shard sets with many sample seams, multi-byte
characters cut by the seams, planted items, with and without a separator, and with a tokenizer whose
decoding is not byte-level (no byte table: the tokenizer decodes)."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders

from mix_assets.core import engine as eng
from mix_assets.stages.audit import published as P
from mix_assets.stages.tokens.bytelevel import ByteDecoder
from mix_assets.stages.tokens.tokenizer import train_bpe
from mix_assets_tests.stages.audit.test_published import ITEM0, ITEM2, SEP, write_token_mix
from mix_assets_tests.oracles import published_audit_ref
from mix_assets_tests.support.audit_fixtures import EVAL_ROWS, filler, make_spec

ACCENTED = ["naïve", "café", "日本語", "emoji🙂", "“quoted”", "—"]


def _docs(seed: int, n: int, planted: dict[int, str]) -> list[str]:
    rng = random.Random(seed)

    def text(k: int) -> str:
        words = filler(rng, k).split()
        return " ".join(rng.choice(ACCENTED) if rng.random() < 0.2 else w for w in words)

    docs = [text(rng.randint(15, 70)) + " " for _ in range(n)]
    for i, item in planted.items():
        docs[i] = text(20) + " " + item + " " + text(10) + " "
    return docs


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    rng = random.Random(7)
    texts = [" ".join(_docs(i, 3, {})) for i in range(60)]
    texts += [f"{r['question']} {' '.join(r['choices'])}" for r in EVAL_ROWS] + [filler(rng, 80) for _ in range(50)]
    train_bpe(texts, 300, [SEP], str(d))  # small: multi-byte characters stay split
    return d


def _tallies(root, ref, sep, chunk_tokens: int, max_carry: int) -> dict:
    from mix_assets.reader import open_mix

    r = open_mix(root, None, split="train", shuffle=False, epochs=1)
    ranges = [rng for s in P.SPLITS for rng in P.shard_ranges(open_mix(root, None, split=s, shuffle=False, epochs=1))]
    r.close()
    got = P.scan_ranges(ranges, eng.Engine(num_cpus=1), location=root, cache_dir=None, open_kwargs={},
                        registry=ref.registry, separator_id=sep, chunk_tokens=chunk_tokens, max_carry_tokens=max_carry)
    # text_bytes (progress lines only) counts the carries' bytes too, and carries are shorter now
    return {s: {**{f.name: getattr(t, f.name) for f in dataclasses.fields(t) if f.name not in ("hits", "text_bytes")},
                "hits": {k: v.tolist() for k, v in sorted(t.hits.items())}} for s, t in got.items()}


def _both(root, ref, sep, chunk_tokens, max_carry) -> tuple[dict, dict]:
    P._TOKENIZERS.clear()
    new = _tallies(root, ref, sep, chunk_tokens, max_carry)
    with published_audit_ref.patched():
        old = _tallies(root, ref, sep, chunk_tokens, max_carry)
    return new, old


@pytest.mark.parametrize("separator", [True, False])
@pytest.mark.parametrize("seq_len,chunk,max_carry", [(7, 5, 1 << 16), (33, 4, 30), (64, 2, 1 << 16)])
def test_new_scanner_tallies_equal_the_old_ones(tmp_path, tok_dir, separator, seq_len, chunk, max_carry):
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    train = _docs(1, 40, {3: ITEM0, 17: ITEM2, 30: ITEM0.upper().replace(" ", ",  ")})
    m = write_token_mix(tmp_path / "mix", tok_dir, train, _docs(2, 12, {5: ITEM2}), seq_len, separator, n_shards=3)
    sep = m["packing"]["separator_id"]
    new, old = _both(tmp_path / "mix", ref, sep, chunk * seq_len, max_carry)
    assert new == old
    assert new["train"]["continued_pieces"] > 0
    if max_carry < 64:  # a tail cap below n + 1 words: boundaries counted as short (items there may be missed)
        assert new["train"]["short_carries"] > 0
    else:
        assert new["train"]["hits"]


def test_seams_cutting_characters_go_through_the_tokenizer_and_still_agree(tmp_path, tok_dir, monkeypatch):
    """Some (carry + piece) rows start or end inside a multi-byte character: the byte table hands those
    rows to the tokenizer (its U+FFFD), and the tallies stay the old ones."""
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    m = write_token_mix(tmp_path / "mix", tok_dir, _docs(3, 40, {8: ITEM2}), _docs(4, 12, {}), 5, True, n_shards=2)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    ids = np.frombuffer((tmp_path / "mix" / m["splits"]["train"]["shards"][0]["path"]).read_bytes(), "<u2")
    cut = [tok.decode(ids[i:i + 5].tolist(), skip_special_tokens=False) for i in range(0, len(ids) - 5, 5)]
    assert any("\ufffd" in t for t in cut)  # the fixture does cut characters at sample seams
    redecoded = []
    real = ByteDecoder._redecode
    monkeypatch.setattr(ByteDecoder, "_redecode", lambda self, *a: redecoded.append(len(a[-1])) or real(self, *a))
    new, old = _both(tmp_path / "mix", ref, m["packing"]["separator_id"], 20, 1 << 16)
    assert new == old and new["train"]["hits"]
    assert sum(redecoded) > 0


def test_a_tokenizer_without_byte_level_decoding_decodes_itself_and_agrees(tmp_path, tok_dir):
    other = tmp_path / "tok2"
    other.mkdir()
    t = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    t.decoder = decoders.Sequence([decoders.ByteLevel()])
    t.save(str(other / "tokenizer.json"))
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    m = write_token_mix(tmp_path / "mix", other, _docs(5, 40, {9: ITEM0}), _docs(6, 12, {}), 11, True, n_shards=2)
    new, old = _both(tmp_path / "mix", ref, m["packing"]["separator_id"], 33, 1 << 16)
    assert P._TOKENIZERS and all(dec is None for _, dec in P._TOKENIZERS.values())
    assert new == old and new["train"]["hits"]
