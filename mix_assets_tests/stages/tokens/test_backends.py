"""The fast encoder backend (stages/tokens/backends.py) gives HF's ids for each pre-tokenizer family it takes,
and falls back to HF, saying why, for a tokenizer it cannot express. Tokenizers are trained here, nothing downloads."""

from __future__ import annotations

import random

import numpy as np
import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from mix_assets.stages.tokens import backends

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")

PIECES = ["the", "There", "hello", "world", "don't", "I'LL", "we've", "She'S", "naïve", "café", "日本語の文章",
          "Привет", "مرحبا", "🙂🙂", "e\u0301", "12345", "3.14159", "1,000,000", "٣٤٥", "x2y", "  ", "   ",
          "\t\t", "\n", "\n\n\n", "\r\n", " \n ", "\u00a0", "\u2003", "\u3000", "\u200b", "\u0085", "\u2028",
          "--", "...", "!?", "(a)", "$5", "a_b", "<tag>", "#!", "'", "''", "' s"]


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(PIECES) + rng.choice(["", " ", "  ", "\n", "\t", " \n\n"]) for _ in range(rng.randint(1, 60))]
        out.append("".join(parts))
    return out + ["", " ", "a" * 500, " " * 300, "\n" * 50, "1" * 40, "don't " * 30, "x" + "  \n" * 20 + "y"]


def _trained(pre, ignore_merges: bool = False, normalizer=None, vocab: int = 1200) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=["<|endoftext|>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_texts(400, 1), trainer=trainer)
    return tok


FAMILIES = {
    "gpt2": lambda: _trained(pre_tokenizers.ByteLevel(add_prefix_space=False)),
    "neox_ignore_merges": lambda: _trained(pre_tokenizers.ByteLevel(add_prefix_space=False), ignore_merges=True),
    "llama3": lambda: _trained(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), ignore_merges=True),
    "qwen2": lambda: _trained(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), ignore_merges=False),
    "digits_individual": lambda: _trained(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])),
    "digit_runs": lambda: _trained(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False), pre_tokenizers.ByteLevel(add_prefix_space=False)])),
    # a split pattern that leaves text between matches: HF makes that text a piece of its own
    "split_with_gaps": lambda: _trained(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{L}+|\p{N}"), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fast_backend_gives_hf_ids_for_each_pre_tokenizer_family(family):
    tok = FAMILIES[family]()
    enc = backends.encoder_for(tok, "auto")
    assert enc.name == "tiktoken", enc.reason
    texts = _texts(300, 2)
    want = backends.HFEncoder(tok).encode(texts)
    for threads in (1, 2):
        got = enc.encode(texts, threads)
        bad = [t for t, a, b in zip(texts, got, want) if a != b]
        assert not bad, f"{family}: {len(bad)} of {len(texts)} differ, first {bad[0]!r}"
        # the flat form token_shards uses: ids back to back, each document followed by the separator
        for sep in (None, 1):
            flat, n = enc.encode_flat(texts, threads, np.dtype("<u2"), sep)
            ref, ref_n = backends.HFEncoder(tok).encode_flat(texts, threads, np.dtype("<u2"), sep)
            assert flat.dtype == np.dtype("<u2") and flat.tolist() == ref.tolist() and n.tolist() == ref_n.tolist()
    assert sum(map(len, want)) > 1000


def test_texts_holding_an_added_token_keep_hf_ids():
    tok = FAMILIES["gpt2"]()
    enc = backends.encoder_for(tok, "auto")
    texts = ["before<|endoftext|>after", "a <pad> b", "no special here", "<|endoftext|>"]
    got = enc.encode(texts)
    assert got == backends.HFEncoder(tok).encode(texts)
    assert tok.token_to_id("<|endoftext|>") in got[0] and tok.token_to_id("<pad>") in got[1]


@pytest.mark.parametrize("make, why", [
    (lambda: _trained(pre_tokenizers.ByteLevel(add_prefix_space=False), normalizer=normalizers.NFC()), "normalizer NFC"),
    (lambda: _trained(pre_tokenizers.ByteLevel(add_prefix_space=True)), "add_prefix_space"),
    (lambda: _trained(pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.ByteLevel(add_prefix_space=False)])),
     "pre-tokenizer sequence"),
    (lambda: _trained(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="removed"), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])),
     "Split behavior"),
])
def test_what_tiktoken_cannot_express_falls_back_to_hf_with_the_reason(make, why):
    tok = make()
    enc = backends.encoder_for(tok, "auto")
    assert enc.name == "hf" and why in enc.reason
    with pytest.raises(ValueError, match="tokenizer.backend fast"):
        backends.encoder_for(tok, "fast")
    texts = _texts(20, 3)
    assert enc.encode(texts) == [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def test_a_merge_list_out_of_rank_order_falls_back():
    import json

    tok = FAMILIES["gpt2"]()
    d = json.loads(tok.to_str())
    merges = d["model"]["merges"]
    merges[0], merges[1] = merges[1], merges[0]  # HF would apply them in another order than their ids rank them
    plan, why = backends.tiktoken_plan(Tokenizer.from_str(json.dumps(d)))
    assert plan is None and "rank order" in why


def test_backend_hf_is_hf_and_an_unknown_backend_is_refused():
    tok = FAMILIES["gpt2"]()
    enc = backends.encoder_for(tok, "hf")
    assert enc.name == "hf" and "configured" in enc.reason
    with pytest.raises(ValueError, match="expected one of"):
        backends.encoder_for(tok, "fastest")


def test_every_shared_data_document_encodes_identically(shared_data):
    """The shared books and GSM8K, one document per paragraph block, under a tokenizer trained on them."""
    texts = []
    for p in sorted((shared_data / "sources").rglob("*")):
        if p.is_file() and p.suffix in (".txt", ".jsonl", ".raw", "") and p.stat().st_size < 50_000_000:
            raw = p.read_bytes().decode("utf-8", errors="replace")
            texts += [b for b in raw.split("\n\n") if b.strip()]
    assert len(texts) > 1000
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts[::7], trainers.BpeTrainer(
        vocab_size=8192, min_frequency=2, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    enc = backends.encoder_for(tok, "auto")
    assert enc.name == "tiktoken", enc.reason
    hf = backends.HFEncoder(tok)
    differ = 0
    for i in range(0, len(texts), 2000):
        batch = texts[i:i + 2000]
        differ += sum(a != b for a, b in zip(enc.encode(batch, 2), hf.encode(batch)))
    assert differ == 0, f"{differ} of {len(texts)} shared-data documents differ"


def test_a_text_tiktoken_gives_up_on_is_encoded_by_hf():
    """fancy-regex's backtracking overflows on ~1 MB of spaces (a Rust panic in tiktoken): that text gets HF's ids."""
    tok = FAMILIES["gpt2"]()
    enc = backends.encoder_for(tok, "auto")
    texts = ["a" + " " * 1_000_000 + "b", "short text"]
    want = backends.HFEncoder(tok).encode(texts)
    assert enc.encode(texts) == want
    flat, n = enc.encode_flat(texts, 1, np.dtype("<u2"), None)
    assert n.tolist() == [len(w) for w in want] and flat.tolist() == want[0] + want[1]
