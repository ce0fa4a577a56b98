"""The mix spec: one YAML file in `configs/` per mix, validated at load time.

`MIX_CONFIG` names the file (default `configs/demo.yaml`); `MIX_STORAGE_ROOT`, when set, overrides
`storage.root`. Relative paths in the file resolve against the directory holding the file, so a
config means the same thing whatever the working directory. A bad file raises `MixConfigError`
naming the file, the field and what was expected.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import os
import re
import string
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

import yaml
from pydantic import (
    BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, field_validator, model_serializer,
    model_validator,
)

from mix_assets.stages.filters.config import FiltersSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "configs" / "demo.yaml"

# Split names that must never be opened by the audit (lm-eval and HF spellings).
TEST_SPLIT_ALIASES = frozenset({"test", "tests", "testing", "eval_test", "test_set"})


def is_test_split(split: str) -> bool:
    """True for any spelling of a test split: an alias, a `test` word inside the name
    ("test_matched", "validation+test", "test[:10%]"), whatever the case."""
    for part in str(split).lower().split("+"):
        base = part.split("[", 1)[0].strip()
        if base in TEST_SPLIT_ALIASES or {"test", "tests", "testing"} & set(re.split(r"[^a-z0-9]+", base)):
            return True
    return False
_NAME = r"^[a-z][a-z0-9_]{0,62}$"


# Upper bounds that catch a slip of the exponent at load rather than after hours of upstream work.
MAX_TARGET_TOKENS = 10**15  # a quadrillion tokens: beyond any pretraining mix
MAX_SAMPLE_LEN = 1 << 21  # tokens per sample (2M context)
MAX_SHARD_TOKENS = 1 << 30  # a shard is held in memory while it is written
# engine.num_cpus is threads in one process or the CPUs of a Ray instance started on this machine: a
# fixed bound (not os.cpu_count(), so a config means the same on the small host that loads it and the
# big one that runs it) above any single host's hardware threads today (2 x 192-core EPYC = 768), which
# catches a slip (20000) before it becomes 2 x num_cpus chunks in flight.
MAX_NUM_CPUS = 1024


def _known_encoding(v: Optional[str]) -> Optional[str]:
    if v is not None:
        try:
            codecs.lookup(v)
        except LookupError:
            raise ValueError(f"unknown encoding {v!r} (a Python codec name, e.g. 'utf-8', 'cp1252')") from None
    return v


def template_fields(template: str) -> list[str]:
    """The field names of a str.format template, refusing anything but plain `{name}` fields: no
    attribute or index access, positional fields, conversions or format specs (a template only
    joins row fields; nothing in it may evaluate anything)."""
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ValueError(f"not a valid template: {e} (write a literal brace as {{{{ or }}}})") from None
    names = []
    for _, name, spec, conv in parts:
        if name is None:
            continue
        shown = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
        head = re.split(r"[.\[]", name, maxsplit=1)[0]
        if not head or head.isdigit():
            raise ValueError(f"template field {shown!r} is positional; name a row field, e.g. {{question}}")
        if head != name:
            raise ValueError(f"template fields are plain field names like {{question}}; {shown!r} reads an "
                             "attribute or an index")
        if conv or spec:
            raise ValueError(f"template field {shown!r} has a conversion or format spec; use plain {{{name}}}")
        names.append(name)
    if not names:
        raise ValueError("the template names no field, e.g. {question}")
    return sorted(set(names))


class MixConfigError(ValueError):
    """A config file that does not describe a buildable mix; the message names file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HubDataset(_Strict):
    """A Hugging Face hub dataset at a pinned revision."""

    kind: Literal["hub"] = "hub"
    repo_id: str  # e.g. "HuggingFaceFW/fineweb-edu"; a local directory laid out like a hub repo also works
    revision: str  # commit sha or tag; a branch name is refused (not reproducible)
    config_name: Optional[str] = None  # the dataset's configuration ("subset"), if it has several
    data_files: Optional[list[str]] = None  # glob(s) inside the repo when only part of it is wanted
    streaming: Optional[bool] = None  # None: stream when the repo is far larger than the budget

    @field_validator("revision")
    @classmethod
    def _pinned(cls, v: str) -> str:
        if v in {"main", "master", "HEAD", ""}:
            raise ValueError("must pin a commit sha or a tag, not a moving branch")
        return v


class LocalJsonl(_Strict):
    """One or more local JSON Lines files (globs allowed)."""

    kind: Literal["jsonl"] = "jsonl"
    paths: list[str]  # files or globs, relative to the config file's directory


class LocalParquet(_Strict):
    """One or more local Parquet files (globs allowed)."""

    kind: Literal["parquet"] = "parquet"
    paths: list[str]  # files or globs, relative to the config file's directory


class TextFolder(_Strict):
    """A folder of plain-text files; each file is split into documents by `unit`."""

    kind: Literal["text"] = "text"
    paths: list[str]  # folders, files or globs, relative to the config file's directory
    unit: Literal["file", "paragraphs", "lines"] = "paragraphs"  # how a file becomes documents
    group_chars: int = Field(0, ge=0)  # >0: join consecutive paragraphs/lines up to this many chars
    encoding: str = "utf-8"  # bytes that do not decode are counted per file, never fatal
    fallback_encoding: Optional[str] = None  # e.g. "cp1252": tried when `encoding` fails (counted)

    @field_validator("encoding", "fallback_encoding")
    @classmethod
    def _codec(cls, v: Optional[str]) -> Optional[str]:
        return _known_encoding(v)


Loader = Annotated[Union[HubDataset, LocalJsonl, LocalParquet, TextFolder], Field(discriminator="kind")]



def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out

class SourceSpec(_Strict):
    """One source of the mix."""

    name: str = Field(pattern=_NAME)  # asset key raw/<name>; also the doc_id prefix
    loader: Loader  # where the rows come from
    split: str = "train"  # the split read (hub / datasets builders); local loaders ignore it
    text_field: Optional[str] = None  # the field holding the text ...
    template: Optional[str] = None  # ... or a str.format template joining fields, "{question}\n{answer}"
    license: str = Field(min_length=1)  # licence as stated by the source
    rationale: str = Field(min_length=20)  # the corpus property relied on (shown in the UI)
    share: float = Field(gt=0, le=1)  # fraction of N (unique tokens) this source provides
    epochs: float = Field(1.0, ge=1, le=8)  # times its unique tokens repeat in the token stream
    priority: int = 0  # keep-rule tie-break across sources (higher survives)
    max_doc_chars: int = Field(1_000_000, gt=0)  # longer documents are dropped and counted
    min_doc_chars: int = Field(1, ge=1)  # shorter documents (after strip) are dropped as empty
    # merged over the mix's `filters:` field by field, e.g. {gopher_quality: {enabled: false}}
    filters: Optional[dict] = None

    @model_serializer(mode="wrap")
    def _omit_unset_filters(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        if out.get("filters") is None:
            out.pop("filters", None)  # configs without filters keep their published bytes
        return out

    @field_validator("template")
    @classmethod
    def _plain_template(cls, v: Optional[str]) -> Optional[str]:
        if v is not None:
            template_fields(v)
        return v

    @model_validator(mode="after")
    def _text_or_template(self) -> "SourceSpec":
        if self.min_doc_chars > self.max_doc_chars:
            raise ValueError(
                f"min_doc_chars ({self.min_doc_chars}) exceeds max_doc_chars ({self.max_doc_chars})"
            )
        if self.loader.kind == "text":
            if self.text_field or self.template:
                raise ValueError("a text-folder source takes neither text_field nor template")
        elif bool(self.text_field) == bool(self.template):
            raise ValueError("give exactly one of text_field or template")
        return self

    @property
    def fields(self) -> list[str]:
        """Row fields this source reads."""
        if self.template:
            return template_fields(self.template)
        return [self.text_field] if self.text_field else []


class TokenizerSpec(_Strict):
    """Which tokenizer tokenises the mix (identity is recorded in the manifest)."""

    kind: Literal["hub", "file", "train"] = "train"
    repo_id: Optional[str] = None  # hub: tokenizer repo
    revision: Optional[str] = None  # hub: pinned commit
    path: Optional[str] = None  # file: a tokenizer.json, relative to the config file's directory
    vocab_size: int = Field(8192, ge=260, le=1 << 20)  # train: BPE vocabulary size
    train_sample_bytes: int = Field(8_000_000, gt=0)  # train: size of the seeded training sample
    special_tokens: list[str] = ["<|endoftext|>"]  # train: added first, in this order
    bytes_per_token_fallback: float = Field(4.0, gt=0)  # estimate when no tokenizer is available yet

    @model_validator(mode="after")
    def _complete(self) -> "TokenizerSpec":
        if self.kind == "hub" and not (self.repo_id and self.revision):
            raise ValueError("kind 'hub' needs repo_id and a pinned revision")
        if self.kind == "file" and not self.path:
            raise ValueError("kind 'file' needs path")
        return self


class PackingSpec(_Strict):
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


class DedupSpec(_Strict):
    """Exact and near-duplicate removal over the merged pool."""

    shingle_words: int = Field(5, ge=1)  # word shingle size
    num_perm: int = Field(128, ge=16)  # MinHash permutations
    threshold: float = Field(0.8, gt=0, lt=1)  # Jaccard at which two documents are near-duplicates
    max_loss_share_warn: float = Field(0.3, gt=0, le=1)  # WARN when a source loses more than this
    # LSH (b, r): among those missing a pair AT the threshold with P <= 1e-6 (lsh.recall_params),
    # the one minimising fp_weight * P(false positive) + fn_weight * P(false negative) (datasketch's
    # integral). Candidates are verified by exact shingle Jaccard, so a false positive costs one set
    # comparison and a false negative loses a duplicate: weight misses more.
    lsh_fp_weight: float = Field(0.05, gt=0, lt=1)
    lsh_fn_weight: float = Field(0.95, gt=0, lt=1)
    threads: int = Field(2, ge=1, exclude=True)  # signature threads; operational, not published (as packing.threads)
    samples_per_reason: int = Field(5, ge=0, le=50)  # excluded docs shown beside their kept member


class EngineSpec(_Strict):
    """Where the per-document map work runs (core/engine.py); outputs are byte-identical on every engine."""

    kind: Literal["local", "ray"] = "local"  # local: this process (threads); ray: Ray tasks
    address: Optional[str] = None  # ray: None starts a local Ray instance; else a cluster, "ray://head:10001"
    # local: threads; ray, local instance: its CPUs (a cluster brings its own). Strict: `true` is not 1.
    num_cpus: int = Field(2, ge=1, le=MAX_NUM_CPUS, strict=True)
    chunk_rows: int = Field(2048, ge=1, strict=True)  # documents per map task (bounds a task's memory; not from num_cpus)
    max_retries: int = Field(3, ge=0, strict=True)  # ray: re-runs of a task lost to a worker or node failure
    object_store_mb: int = Field(256, ge=64, strict=True)  # ray, local instance: its object store (Ray's default is 30 % of RAM)
    # ray with an address: how long it may take to answer (a TCP connect, then as a gRPC server) before the
    # step fails naming it (ray.init where nobody, or not Ray, answers retries forever; core/engine.check_reachable)
    connect_timeout_s: float = Field(30.0, gt=0, le=3600, strict=True)


def path_names_test_split(path: str) -> Optional[str]:
    """The first component of a relative path (file names included) that is or aliases a test split."""
    for part in re.split(r"[/\\]", str(path)):
        if part not in ("", ".", "..") and is_test_split(part):
            return part
    return None


def split_name_problem(split: str) -> Optional[str]:
    """Why `split` cannot name a split (a path or empty), or None."""
    if not str(split).strip():
        return "is empty"
    if re.search(r"[/\\\x00]", split) or ".." in split:
        return "looks like a path (a separator or '..')"
    return None


class EvalTask(_Strict):
    """One evaluation task the model will be scored on; only its non-test splits are read.

    Reference items of a row (see `stages/audit/evals.py`): the string fields joined in order form the stem;
    each string of a list-valued field (`endings`, `question.choices.text`) gives one item = stem +
    that string, as the harness presents context + continuation; without list fields the stem is
    the one item.
    """

    name: str = Field(pattern=_NAME)
    dataset: Union[HubDataset, "LocalEvalFiles"] = Field(discriminator="kind")
    scored_split: str  # the split the harness scores (documented per task; may be validation or test)
    audit_splits: list[str] = Field(min_length=1)  # non-test splits whose text is audited
    fields: list[str] = Field(min_length=1)  # dotted paths, e.g. "question.stem", "question.choices.text"
    min_rows: int = Field(1, ge=1)  # the audit fails when fewer rows than this were read
    note: str = ""  # where the scored split was verified

    @field_validator("audit_splits")
    @classmethod
    def _no_test(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if is_test_split(s)]
        if bad:
            raise ValueError(f"test splits are never audited (found {bad}); use validation/dev splits")
        return v

    @field_validator("fields")
    @classmethod
    def _dotted(cls, v: list[str]) -> list[str]:
        bad = [f for f in v if not re.fullmatch(r"[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*", f)]
        if bad:
            raise ValueError(f"fields are dotted paths like 'question.choices.text', got {bad}")
        return v

    @model_validator(mode="after")
    def _audit_inputs(self) -> "EvalTask":
        for s in self.audit_splits:
            why = split_name_problem(s)
            if why:
                raise ValueError(f"eval task {self.name!r}: audit_splits entry {s!r} {why}; give a split name")
        dupes = sorted({s for s in self.audit_splits if self.audit_splits.count(s) > 1})
        if dupes:  # each entry is read once: a repeat would count its rows twice toward min_rows
            raise ValueError(f"eval task {self.name!r}: audit_splits lists {dupes} more than once")
        for pattern in getattr(self.dataset, "data_files", None) or []:
            part = path_names_test_split(pattern)
            if part:
                raise ValueError(f"eval task {self.name!r}: dataset.data_files entry {pattern!r} names a test "
                                 f"split ({part!r}); the audit reads validation/dev files only")
        return self


class LocalEvalFiles(_Strict):
    """A local folder holding `<split>.jsonl` files."""

    kind: Literal["local"] = "local"
    path: str  # folder, relative to the config file's directory


EvalTask.model_rebuild()


class FuzzyAuditSpec(_Strict):
    """The fuzzy contamination advisory (stages/audit/fuzzy.py): near copies of eval items, WARN only, excludes nothing.

    Advisory settings change no published byte, so the review config (mix_config.json) leaves them out."""

    enabled: bool = True
    threshold: float = Field(0.6, gt=0, le=1)  # exact Jaccard of an item with its best equal-length window
    shingle: int = Field(2, ge=1, le=5)  # words per shingle: one-word edits found in items of >= 5*shingle-1 words
    num_perm: int = Field(32, ge=4, le=256)  # MinHash permutations per item (candidate generation only)


class AuditSpec(_Strict):
    """Contamination audit against the eval registry."""

    ngram: int = Field(13, ge=4)  # n-gram length in normalised words
    tasks: list[EvalTask] = []  # the eval registry
    mask_contaminated: bool = True  # drop contaminated documents (off only to prove the gate fires)
    source_rate_warn: float = Field(0.02, gt=0, le=1)  # WARN when a source's contaminated share exceeds
    # An item shorter than `ngram` words is matched as one n-gram over all its words (whole-item
    # rule) when it has at least this many words; shorter ones are too generic to attribute and are
    # counted as `short_items_unmatched` in the denominators.
    short_item_min_words: int = Field(8, ge=1)
    scrub_words: int = Field(8, ge=4)  # audit_artifact_scrubbed: runs of this many item words are a leak
    threads: int = Field(2, ge=1, exclude=True)  # scan threads; operational, not published (as packing.threads)
    fuzzy: FuzzyAuditSpec = FuzzyAuditSpec()  # items shorter than short_item_min_words are not matched either

    @model_validator(mode="after")
    def _short_rule(self) -> "AuditSpec":
        if self.short_item_min_words > self.ngram:
            raise ValueError("short_item_min_words must not exceed ngram")
        return self


class SplitSpec(_Strict):
    """The held-out validation split."""

    val_fraction: float = Field(0.02, gt=0, lt=0.5)  # target share of kept documents
    tolerance: float = Field(0.5, gt=0, le=1)  # allowed relative deviation of the realised share


class PublishSpec(_Strict):
    """Where the published revision goes: a local directory, s3://bucket/prefix or hf://datasets/org/name."""

    url: str = "../build/published"  # local path (relative to the config file's directory) or URL
    s3_endpoint_url: Optional[str] = None  # for S3-compatible servers (SeaweedFS, MinIO)
    s3_region: Optional[str] = None
    # The verifier reads as a stranger. S3: env prefix of a read-only key pair (<P>_ACCESS_KEY_ID,
    # <P>_SECRET_ACCESS_KEY); hub: name of an env var holding a read token. None = anonymous access.
    # (Writes use the ordinary credential chain: AWS_* variables / HF_TOKEN.)
    read_credentials_env: Optional[str] = None


class StorageSpec(_Strict):
    """The one root every artifact is written under."""

    root: str = "../build/storage"  # local path (relative to the config file's directory) or s3://bucket/prefix
    s3_endpoint_url: Optional[str] = None  # for S3-compatible servers
    cache_dir: str = "../build/cache"  # local scratch for S3-backed roots


class DemoCorpusSpec(_Strict):
    """The embedded demo corpus, generated offline and deterministically before it is read."""

    path: str = "../build/demo_corpus"  # where it is generated, relative to the config file's directory
    seed: int = 7  # generator seed (independent of the mix seed)
    docs_per_source: int = Field(400, ge=20)  # documents per generated source


class ScheduleSpec(_Strict):
    """When the scheduled rebuild runs."""

    cron: str = "0 3 * * 0"  # default weekly, Sunday 03:00
    timezone: str = "UTC"
    enabled: bool = True  # the schedule starts RUNNING in a new deployment; false: off until toggled in the UI


class MixSpec(_Strict):
    """A whole mix."""

    name: str = Field(pattern=_NAME)  # the mix's name (dataset card, revision ids)
    description: str = ""
    target_tokens: int = Field(gt=0, le=MAX_TARGET_TOKENS)  # N: tokens in the final training mix
    headroom: float = Field(1.15, ge=1.1, le=1.25)  # raw sampling multiplier; dedup and masks eat it
    seed: int = 0  # the mix seed (sampling, split, tokenizer sample)
    sources: list[SourceSpec] = Field(min_length=1)
    tokenizer: TokenizerSpec = TokenizerSpec()
    packing: PackingSpec = PackingSpec()
    dedup: DedupSpec = DedupSpec()
    filters: Optional[FiltersSpec] = None  # the filter cascade; None: no filters (sanity rules of the raw stage only)
    # Where map work runs. Not part of the mix's identity (left out of dumps, so of the published
    # mix_config.json and the fingerprint): every engine writes the same bytes.
    engine: EngineSpec = Field(EngineSpec(), exclude=True)
    audit: AuditSpec = AuditSpec()
    split: SplitSpec = SplitSpec()
    storage: StorageSpec = StorageSpec()
    publish: PublishSpec = PublishSpec()
    schedule: ScheduleSpec = ScheduleSpec()
    demo_corpus: Optional[DemoCorpusSpec] = None  # set only by the embedded demo
    owners: list[str] = ["team:data"]  # shown on every asset in the UI

    # Filled by load_spec: where the file was, for resolving relative paths. Not part of the YAML.
    config_path: Optional[str] = Field(None, exclude=True)

    @model_serializer(mode="wrap")
    def _omit_unset_filters(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        if out.get("filters") is None:
            out.pop("filters", None)  # configs without filters keep their published bytes and fingerprint
        return out

    @model_validator(mode="after")
    def _consistent(self) -> "MixSpec":
        names = [s.name for s in self.sources]
        for s in self.sources:
            if s.filters is not None:
                self.filters_for(s.name)  # a bad override fails at load, naming the source
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"source names must be unique, repeated: {dup}")
        total = sum(s.share for s in self.sources)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"source shares must sum to 1, they sum to {total:.6f}")
        if self.packing.sample_len > self.target_tokens:
            raise ValueError(f"packing: a sample of {self.packing.sample_len} tokens is longer than the whole mix "
                             f"(target_tokens {self.target_tokens})")
        sep, tok = self.packing.separator, self.tokenizer
        if sep is not None and tok.kind == "train" and sep not in tok.special_tokens:
            # a trained byte-level BPE has no other token a config could name
            raise ValueError(f"packing.separator {sep!r} is not one of tokenizer.special_tokens "
                             f"{tok.special_tokens}, so the trained tokenizer would not have it")
        tasks = [t.name for t in self.audit.tasks]
        if len(set(tasks)) != len(tasks):
            raise ValueError("eval task names must be unique")
        why = location_problem(self)
        if why:
            raise ValueError(why)
        return self

    # -- derived values -------------------------------------------------------------------
    @property
    def base_dir(self) -> Path:
        return Path(self.config_path).parent if self.config_path else REPO_ROOT / "configs"

    def resolve(self, p: str) -> str:
        """A config path as an absolute local path (`~` expanded), or the URL unchanged."""
        if "://" in p:
            return p
        return str((self.base_dir / os.path.expanduser(p)).resolve())

    def with_storage_root(self, root: str, origin: str) -> "MixSpec":
        """This spec with `storage.root` replaced (MIX_STORAGE_ROOT, a resource's override), checked
        like the file's own (`origin` names where the root came from)."""
        spec = self.model_copy(update={"storage": self.storage.model_copy(update={"root": root})})
        why = location_problem(spec)
        if why:
            raise MixConfigError(f"{self.config_path}: {why} (storage.root from {origin})")
        return spec

    def source(self, name: str) -> SourceSpec:
        return next(s for s in self.sources if s.name == name)

    def filters_for(self, name: str) -> Optional[FiltersSpec]:
        """The filters a source runs: the mix's `filters:` with the source's override merged over it."""
        over = self.source(name).filters
        if over is None:
            return self.filters
        base = self.filters.model_dump(exclude_unset=True) if self.filters is not None else {}
        try:
            return FiltersSpec.model_validate(_deep_merge(base, over))
        except ValidationError as e:
            raise ValueError(f"sources[{name}].filters: {e}") from None

    def unique_budget(self, name: str) -> int:
        """Unique tokens a source must still provide after dedup, masks and the split."""
        return int(round(self.target_tokens * self.source(name).share))

    def minimum_tokens(self, name: str) -> int:
        """Kept tokens a source needs: its unique budget on the train side after the validation share.

        The split reserves val_fraction of the kept documents, so kept x (1 - val_fraction) must cover
        the unique budget: kept >= ceil(unique_budget / (1 - val_fraction)).
        """
        return math.ceil(self.unique_budget(name) / (1 - self.split.val_fraction))

    def stream_budget(self, name: str) -> int:
        """Tokens a source contributes to the token stream: N x share x epochs."""
        s = self.source(name)
        return int(round(self.target_tokens * s.share * s.epochs))

    def keep_share(self, name: str) -> float:
        """The share of a source's tokens its document filters are expected to keep (1.0 without filters)."""
        f = self.filters_for(name)
        return f.keep_share if f is not None and f.active() else 1.0

    def raw_budget(self, name: str) -> int:
        """Tokens sampled from a source: its unique budget x headroom (plus the validation share), over the
        share its filters are expected to keep."""
        return int(round(self.unique_budget(name) * self.headroom / (1.0 - self.split.val_fraction)
                         / self.keep_share(name)))

    def raw_minimum_tokens(self, name: str) -> int:
        """Tokens a source's raw sample needs so that what its filters keep still covers `minimum_tokens`."""
        return math.ceil(self.minimum_tokens(name) / self.keep_share(name))

    def canonical_json(self) -> str:
        """The resolved spec as canonical JSON (published beside the mix; hashed for code_version)."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]


def _is_within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _s3_within(url: str, root: str) -> bool:
    (b1, _, k1), (b2, _, k2) = (u.removeprefix("s3://").partition("/") for u in (url, root))
    k1, k2 = k1.strip("/"), k2.strip("/")
    return b1 == b2 and (not k2 or k1 == k2 or k1.startswith(k2 + "/"))


def location_problem(spec: "MixSpec") -> Optional[str]:
    """Why `storage.root` or `publish.url` cannot hold a mix (None when both can).

    Refused: `/`, the home directory or a parent of it, the project checkout (REPO_ROOT) or a parent
    of it (a rebuild deletes and rewrites folders under its storage root), and a publish url inside
    the storage root (a rebuild would rewrite published revisions). Local paths after `~` expansion
    and symlinks; s3:// URLs are compared by bucket and prefix.
    """
    try:
        home = Path.home().resolve()
    except RuntimeError:  # no HOME and no passwd entry: nothing to compare with
        home = None
    fields = (("storage.root", spec.storage.root), ("publish.url", spec.publish.url))
    local = {}
    for field, value in fields:
        if "://" in value:
            continue
        path = Path(spec.resolve(value))
        local[field] = path
        shown = f"{field} {value!r}" + ("" if str(path) == value else f" (= {path})")
        own = f"give a folder of its own, e.g. ../build/{'storage' if field == 'storage.root' else 'published'}"
        if path == Path(path.anchor):
            return f"{shown} is the filesystem root; {own}"
        if home is not None and _is_within(home, path):
            what = "the home directory" if path == home else f"a parent of the home directory {home}"
            return f"{shown} is {what}; {own}"
        if _is_within(REPO_ROOT, path):
            what = "the project checkout" if path == REPO_ROOT else f"a parent of the project checkout {REPO_ROOT}"
            return f"{shown} is {what}; {own}"
    pub, root = spec.publish.url, spec.storage.root
    if len(local) == 2:
        inside = _is_within(local["publish.url"], local["storage.root"])
    else:
        inside = (pub.startswith("s3://") and root.startswith("s3://") and _s3_within(pub, root)
                  and spec.publish.s3_endpoint_url == spec.storage.s3_endpoint_url)
    if inside:
        shown = {f: f" (= {local[f]})" if f in local and str(local[f]) != v else "" for f, v in fields}
        return (f"publish.url {pub!r}{shown['publish.url']} is inside storage.root {root!r}{shown['storage.root']}: "
                "a rebuild rewrites what is under the storage root, a published revision must never change; "
                "publish beside it, e.g. ../build/published")
    return None


def _describe(err: dict) -> str:
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-after", "tagged-union")))
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
    return f"  {loc or '<top level>'}: {msg}{shown}"


def parse_spec(data: object, origin: str) -> MixSpec:
    """Validate a parsed YAML document; errors name `origin` and each bad field."""
    if not isinstance(data, dict):
        raise MixConfigError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return MixSpec.model_validate({**data, "config_path": origin})
    except ValidationError as e:
        lines = "\n".join(_describe(x) for x in e.errors(include_url=False))
        raise MixConfigError(f"{origin}: invalid mix config:\n{lines}") from None


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, line: int, first: int):
        super().__init__(f"line {line}: key {key!r} is given twice (first on line {first})")


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping key given twice (PyYAML silently keeps the last value)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` overrides on purpose
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise _DuplicateKey(key, line, seen[key])
            except TypeError:  # an unhashable key: the base constructor reports it
                continue
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _load_yaml(text: str, origin: str) -> object:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except _DuplicateKey as e:
        raise MixConfigError(f"{origin}: {e}") from None
    except yaml.YAMLError as e:
        raise MixConfigError(f"{origin}: not valid YAML: {e}") from None


def load_spec(path: str | os.PathLike | None = None) -> MixSpec:
    """Load the mix spec from `path`, else `$MIX_CONFIG`, else configs/demo.yaml."""
    p = Path(path or os.environ.get("MIX_CONFIG") or DEFAULT_CONFIG)
    if not p.is_absolute():
        p = (Path.cwd() / p) if (Path.cwd() / p).exists() else (REPO_ROOT / p)
    p = p.resolve()
    if not p.is_file():
        raise MixConfigError(f"{p}: mix config file not found (set MIX_CONFIG to a file in configs/)")
    data = _load_yaml(p.read_text(encoding="utf-8"), str(p))
    spec = parse_spec(data, str(p))
    root = os.environ.get("MIX_STORAGE_ROOT")
    if root:
        spec = spec.with_storage_root(root, "MIX_STORAGE_ROOT")
    return spec
