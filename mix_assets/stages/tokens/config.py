"""The tokens stage's config sections: which tokenizer (`TokenizerSpec`) and how tokens become samples
and shards (`PackingSpec`)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from mix_assets.core.spec import Strict

# Upper bounds that catch a slip of the exponent at load rather than after hours of upstream work.
MAX_SAMPLE_LEN = 1 << 21  # tokens per sample (2M context)
MAX_SHARD_TOKENS = 1 << 30  # a shard is held in memory while it is written


class TokenizerSpec(Strict):
    """Which tokenizer tokenises the mix (identity is recorded in the manifest)."""

    kind: Literal["hub", "file", "train"] = "train"
    repo_id: Optional[str] = None  # hub: tokenizer repo
    revision: Optional[str] = None  # hub: pinned commit
    path: Optional[str] = None  # file: a tokenizer.json, relative to the config file's directory
    vocab_size: int = Field(8192, ge=260, le=1 << 20)  # train: BPE vocabulary size
    train_sample_bytes: int = Field(8_000_000, gt=0)  # train: size of the seeded training sample
    special_tokens: list[str] = ["<|endoftext|>"]  # train: added first, in this order
    bytes_per_token_fallback: float = Field(4.0, gt=0)  # estimate when no tokenizer is available yet
    # which encoder token_shards runs (stages/tokens/backends.py): auto = tiktoken where it is exact, else HF;
    # hf; fast = tiktoken or an error. Operational like packing.threads: the ids are the same either way, so
    # it is in no published config (exclude) and no code_version or artifact key (repr)
    backend: Literal["auto", "hf", "fast"] = Field("auto", exclude=True, repr=False)

    @model_validator(mode="after")
    def _complete(self) -> "TokenizerSpec":
        if self.kind == "hub" and not (self.repo_id and self.revision):
            raise ValueError("kind 'hub' needs repo_id and a pinned revision")
        if self.kind == "file" and not self.path:
            raise ValueError("kind 'file' needs path")
        return self


class PackingSpec(Strict):
    """How tokens become fixed-length samples and shards."""

    seq_len: int = Field(512, ge=8, le=MAX_SAMPLE_LEN)  # model context length
    shifted_targets: bool = False  # True: samples are seq_len + 1 tokens (inputs and shifted targets)
    samples_per_seq: int = Field(1, ge=1, le=1024)  # sample = samples_per_seq * seq_len tokens (unless shifted)
    separator: Optional[str] = None  # token appended after each document; None = contiguous, no separator
    # target tokens per shard (rounded down to whole samples)
    shard_tokens: int = Field(1 << 22, ge=1024, le=MAX_SHARD_TOKENS)
    encode_batch_docs: int = Field(1000, ge=1)  # documents per encode_batch call (bounds memory)
    doc_index: bool = True  # write a per-shard index of document starts (format/docindex.py, docs/tokens.md)
    # tokenizer threads (RAYON_NUM_THREADS). Like `engine`, an operational knob left out of the
    # published config: the fingerprint must not depend on how many cores built the mix (issue 13 §5)
    threads: int = Field(2, ge=1, exclude=True)

    @property
    def sample_len(self) -> int:
        return self.seq_len + 1 if self.shifted_targets else self.seq_len * self.samples_per_seq

    @model_validator(mode="after")
    def _sane_sample(self) -> "PackingSpec":
        if self.sample_len > MAX_SAMPLE_LEN:
            raise ValueError(f"a sample of seq_len x samples_per_seq = {self.sample_len:,} tokens exceeds "
                             f"{MAX_SAMPLE_LEN:,}")
        return self
