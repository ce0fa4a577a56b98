"""stages/tokens/bytelevel: the byte table gives exactly the tokenizer's `decode_batch(..., skip_special_tokens=False)`,
rows cut inside a multi-byte character included, and refuses tokenizers whose decoding is not byte-level."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from mix_assets.stages.tokens.bytelevel import ByteDecoder, _invalid_rows
from mix_assets.stages.tokens.tokenizer import train_bpe

SEP = "<|endoftext|>"
WORDS = ["naïve", "café", "über", "smörgåsbord", "日本語", "テキスト", "emoji🙂", "—", "“quoted”", "plain", "words",
         "the", "of", "and", "x"]


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> Tokenizer:
    d = tmp_path_factory.mktemp("bl")
    rng = random.Random(1)
    train_bpe([_text(rng, 60) for _ in range(100)], 300, [SEP], str(d))
    return Tokenizer.from_file(str(d / "tokenizer.json"))


def _stream(tok: Tokenizer, seed: int = 2, docs: int = 60) -> np.ndarray:
    rng = random.Random(seed)
    ids = []
    for e in tok.encode_batch([_text(rng, rng.randint(5, 40)) for _ in range(docs)], add_special_tokens=False):
        ids += e.ids + [tok.token_to_id(SEP)]
    return np.asarray(ids, np.uint16)


def test_rows_cut_anywhere_decode_as_the_tokenizer_does(tok):
    dec = ByteDecoder.of(tok)
    assert dec is not None
    ids = _stream(tok)
    rng = np.random.default_rng(0)
    bounds = np.concatenate([[0], np.sort(rng.integers(0, len(ids), 400)), [len(ids)]]).astype(np.int64)
    want = tok.decode_batch([ids[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])], skip_special_tokens=False)
    assert dec.texts(ids, bounds).to_pylist() == want
    assert any("\ufffd" in t for t in want)  # some rows cut a character: the tokenizer's replacement is kept
    assert any(SEP in t for t in want) and "" in want  # separators decode as text; empty rows stay empty


def test_ids_outside_the_vocabulary_decode_to_nothing_as_in_the_tokenizer(tok):
    dec = ByteDecoder.of(tok)
    ids = np.array([5, 60000, 7, tok.get_vocab_size(), 9], np.int64)
    bounds = np.array([0, 2, 5], np.int64)
    assert dec.texts(ids, bounds).to_pylist() == tok.decode_batch([[5, 60000], [7, tok.get_vocab_size(), 9]],
                                                                  skip_special_tokens=False)
    assert dec.texts(np.zeros(0, np.int64), np.zeros(1, np.int64)).to_pylist() == []
    # shard dtypes (unsigned: clamped in their own dtype, gathered without a bounds check): the same rows
    for dtype in (np.uint16, np.uint32):
        assert dec.texts(ids.astype(dtype), bounds).to_pylist() == dec.texts(ids, bounds).to_pylist()
    assert dec.texts(np.array([65535, 5], np.uint16), np.array([0, 1, 2])).to_pylist() == ["", tok.decode([5])]


def test_only_byte_level_decoding_gets_a_table(tok):
    other = Tokenizer.from_str(tok.to_str())
    other.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    assert ByteDecoder.of(other) is None
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.pre_tokenizer = pre_tokenizers.Whitespace()
    wp.decoder = decoders.WordPiece()
    wp.train_from_iterator(["plain words of the text"] * 5, trainers.WordPieceTrainer(vocab_size=60,
                                                                                     special_tokens=["[UNK]"]))
    assert ByteDecoder.of(wp) is None


def test_an_added_token_that_decodes_verbatim_disagrees_and_gets_no_table(tok):
    """An added token outside the byte alphabet's meaning ("é" is the byte 0xE9 there): if the tokenizer
    does not decode it as the table would, the table is refused rather than trusted."""
    other = Tokenizer.from_str(tok.to_str())
    other.add_tokens(["é"])
    i = other.token_to_id("é")
    if other.decode([i]) == "é":
        assert ByteDecoder.of(other) is None
    else:
        assert ByteDecoder.of(other) is not None


def test_invalid_rows_are_the_ones_not_valid_utf8_alone():
    data = np.frombuffer("ab".encode() + "é".encode() + b"\xe2\x80" + b"\x99z", np.uint8)
    offsets = np.array([0, 2, 4, 6, 8], np.int64)  # "ab", "é", a cut lead, its continuation + "z"
    assert _invalid_rows(data, offsets).tolist() == [2, 3]
    assert _invalid_rows(data, np.array([0, 2, 4, 8], np.int64)).tolist() == []
