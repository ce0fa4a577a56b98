"""The mix spec: one YAML file in `configs/` per mix, validated at load time.

`MixSpec` composes the stage sections, each defined beside its stage (`stages/<stage>/config.py`:
sources, dedup, audit, split, tokens, publish) on the base in `core/spec.py`; what lives here is what no
stage owns (engine, storage, schedule), the checks across sections, and loading. No logic module imports
this file: the assets hand each stage the spec or its section.

`MIX_CONFIG` names the file (default `configs/demo.yaml`); `MIX_STORAGE_ROOT`, when set, overrides
`storage.root`. Relative paths in the file resolve against the directory holding the file, so a
config means the same thing whatever the working directory. A bad file raises `MixConfigError`
naming the file, the field and what was expected.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Literal, Optional

import yaml
from pydantic import (
    Field, SerializerFunctionWrapHandler, ValidationError, model_serializer,
    model_validator,
)

from mix_assets.core import transport
from mix_assets.core.spec import NAME
from mix_assets.core.spec import Strict
from mix_assets.stages.audit.config import AuditSpec
from mix_assets.stages.dedup.config import DedupSpec
from mix_assets.stages.filters.config import FiltersSpec
from mix_assets.stages.lines.config import LineDedupSpec
from mix_assets.stages.quality.config import MAX_TIER_EPOCHS, QualitySpec
from mix_assets.stages.publish.config import PublishSpec
from mix_assets.stages.sources.config import DemoCorpusSpec, SourceSpec
from mix_assets.stages.split.config import SplitSpec
from mix_assets.stages.tokens.config import PackingSpec, TokenizerSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "configs" / "demo.yaml"

# Upper bounds that catch a slip of the exponent at load rather than after hours of upstream work.
MAX_TARGET_TOKENS = 10**15  # a quadrillion tokens: beyond any pretraining mix
# engine.num_cpus is threads in one process or the CPUs of a Ray instance started on this machine: a
# fixed bound (not os.cpu_count(), so a config means the same on the small host that loads it and the
# big one that runs it) above any single host's hardware threads today (2 x 192-core EPYC = 768), which
# catches a slip (20000) before it becomes 2 x num_cpus chunks in flight.
MAX_NUM_CPUS = 1024


class MixConfigError(ValueError):
    """A config file that does not describe a buildable mix; the message names file and field."""


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class EngineSpec(Strict):
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


class StorageSpec(Strict):
    """The one root every artifact is written under."""

    root: str = "../build/storage"  # local path (relative to the config file's directory) or s3://bucket/prefix
    s3_endpoint_url: Optional[str] = None  # for S3-compatible servers
    cache_dir: str = "../build/cache"  # local scratch for S3-backed roots


class ScheduleSpec(Strict):
    """When the scheduled rebuild runs."""

    cron: str = "0 3 * * 0"  # default weekly, Sunday 03:00
    timezone: str = "UTC"
    enabled: bool = True  # the schedule starts RUNNING in a new deployment; false: off until toggled in the UI


class MixSpec(Strict):
    """A whole mix."""

    name: str = Field(pattern=NAME)  # the mix's name (dataset card, revision ids)
    description: str = ""
    target_tokens: int = Field(gt=0, le=MAX_TARGET_TOKENS)  # N: tokens in the final training mix
    headroom: float = Field(1.15, ge=1.1, le=1.25)  # raw sampling multiplier; dedup and masks eat it
    seed: int = 0  # the mix seed (sampling, split, tokenizer sample)
    sources: list[SourceSpec] = Field(min_length=1)
    tokenizer: TokenizerSpec = TokenizerSpec()
    packing: PackingSpec = PackingSpec()
    dedup: DedupSpec = DedupSpec()
    filters: Optional[FiltersSpec] = None  # the filter cascade; None: no filters (sanity rules of the raw stage only)
    line_dedup: Optional[LineDedupSpec] = None  # cross-document line dedup (stages/lines); None: off
    quality: Optional[QualitySpec] = None  # the quality classifier (stages/quality); None: no quality stage
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
        if out.get("line_dedup") is None:
            out.pop("line_dedup", None)  # likewise without line dedup
        if out.get("quality") is None:
            out.pop("quality", None)  # likewise without a quality classifier
        return out

    @model_validator(mode="after")
    def _consistent(self) -> "MixSpec":
        names = [s.name for s in self.sources]
        for s in self.sources:
            if s.filters is not None:
                self.filters_for(s.name)  # a bad override fails at load, naming the source
        if self.line_dedup is not None and (unknown := sorted(set(self.line_dedup.skip) - set(names))):
            raise ValueError(f"line_dedup.skip names unknown source(s) {unknown}; sources: {names}")
        keep_by = [n for n in names if (f := self.filters_for(n)) is not None and "quality" in f.active()]
        if keep_by and self.quality is None:
            raise ValueError(f"filters.quality keeps {keep_by} by a classifier, but the mix has no `quality:` section")
        for n in keep_by:
            tiers = self.filters_for(n).quality.tiers or []
            top = max(tiers, key=lambda t: t.epochs, default=None)
            if top is not None and self.source(n).epochs * top.epochs > MAX_TIER_EPOCHS:
                raise ValueError(
                    f"sources[{n}]: tier {top.name!r} repeats a document {self.source(n).epochs:g} x {top.epochs:g} "
                    f"= {self.source(n).epochs * top.epochs:g} times (source epochs x tier epochs); at most "
                    f"{MAX_TIER_EPOCHS:g} (repeating past the top tier's 2-4x learns its artifacts)")
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
        if transport.has_scheme(p):
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
        rule = {"threshold", "top_fraction"}
        if isinstance(over, dict) and isinstance(over.get("quality"), dict) and rule & set(over["quality"]) \
                and isinstance(base.get("quality"), dict):
            # a source's quality rule replaces the mix's (a threshold and a top fraction never merge)
            base = {**base, "quality": {k: v for k, v in base["quality"].items() if k not in rule}}
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
        if transport.has_scheme(value):
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
        inside = (transport.is_s3(pub) and transport.is_s3(root) and transport.s3_url_within(pub, root)
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
