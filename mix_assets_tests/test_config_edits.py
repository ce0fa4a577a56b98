"""Issue 27 "Where it stands" item 1: a config edited between runs, then a partial selection, never publishes a
revision its config did not build.

The demo is built once per session (support/built_demo.py); each case restores that build (corpus, storage,
published target) at the same paths, edits one field, and materialises a selection that leaves out the asset
reading the field (the UI allows it).
Each case must end in one of two ways:

(a) refused: the first consumer fails naming the upstream asset to re-materialise, nothing is
    materialised, no revision is added and `latest` does not move; or
(b) published: the revision's `review/mix_config.json` is the edited config, and a from-scratch build of
    that config gives the same fingerprint.

Never a revision whose published config differs from the one that built it. Today all eight are refused; so
is `name` edited then `published_revision` alone (manifest's code_version holds what it writes from the
spec); a control edit of a field no artifact's bytes depend on (`dedup.samples_per_reason`) takes path (b).

The last test is the general form: every config field an asset reads at run time must move a code_version
on its chain, so that no edit of it can slip past the consumers' lineage walk.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
import yaml

from mix_assets.config import MixSpec, load_spec
from mix_assets.core.spec import Strict
from mix_assets.definitions import build_definitions
from mix_assets.stages.common import NO_REUSE_ENV
from mix_assets.stages.manifest.builder import review_config_json
from mix_assets_tests.test_integrity_lineage import failures, latest, materialize, published

pytestmark = pytest.mark.slow

REDO = "Re-materialise, in this order: "


def _edit_filter_threshold(d: dict, case: Path) -> None:
    d["filters"]["gopher_quality"] = {**(d["filters"]["gopher_quality"] or {}), "min_doc_words": 5}


def _edit_source_path(d: dict, case: Path) -> None:
    """stories read from another file: the same documents but its last 10 (other data, another path)."""
    src = next(s for s in d["sources"] if s["name"] == "stories")
    old = Path(src["loader"]["paths"][0])
    new = old.with_name("stories_v2.jsonl")
    new.write_text("".join(old.read_text().splitlines(keepends=True)[:-10]))
    src["loader"]["paths"] = [str(new)]


def _set(section: str, field: str, value):
    def edit(d: dict, case: Path) -> None:
        d[section][field] = value
    return edit


def _set_top(field: str, value):
    def edit(d: dict, case: Path) -> None:
        d[field] = value
    return edit


def _language_off(d: dict, case: Path) -> None:
    d["filters"]["language"] = {**d["filters"]["language"], "enabled": False}


def _after(asset: str) -> dg.AssetSelection:
    """`asset`'s children and everything downstream of them (`asset` itself left out)."""
    return dg.AssetSelection.assets(asset).downstream() - dg.AssetSelection.assets(asset)


def _down(asset: str) -> dg.AssetSelection:
    return dg.AssetSelection.assets(asset).downstream()


# (id, edit, selection, the asset whose config changed: the refusal must name it). The selections: the one the
# issue names where it names one (token_shards* for the vocab size, manifest* for the filter threshold);
# otherwise everything strictly downstream of the asset that reads the edited field, so that the first
# consumer of the stale artifact runs (the largest selection that still skips the edited asset); and, for
# every case, manifest* too (the smallest selection that writes `review/mix_config.json` and publishes).
CASES = [
    ("filter_threshold", _edit_filter_threshold, _down("manifest"), "document_filters"),
    ("filter_threshold", _edit_filter_threshold, _after("document_filters"), "document_filters"),
    ("dedup_threshold", _set("dedup", "threshold", 0.5), _after("dedup_keys"), "dedup_keys"),
    ("dedup_threshold", _set("dedup", "threshold", 0.5), _down("manifest"), "dedup_keys"),
    ("vocab_size", _set("tokenizer", "vocab_size", 2048), _down("token_shards"), "tokenizer"),
    ("vocab_size", _set("tokenizer", "vocab_size", 2048), _down("manifest"), "tokenizer"),
    ("source_path", _edit_source_path, _after("raw/stories"), "raw/stories"),
    ("source_path", _edit_source_path, _down("manifest"), "raw/stories"),
    ("mask_contaminated", _set("audit", "mask_contaminated", False), _after("exclusion_masks"), "exclusion_masks"),
    ("mask_contaminated", _set("audit", "mask_contaminated", False), _down("manifest"), "exclusion_masks"),
    ("language_filter", _language_off, _after("document_filters"), "document_filters"),
    ("language_filter", _language_off, _down("manifest"), "document_filters"),
    ("seed", _set_top("seed", 1235), _after("raw/stories"), "raw/stories"),
    ("seed", _set_top("seed", 1235), _down("manifest"), "raw/stories"),
    # raw/<source> reads val_fraction too (its budget holds the validation share): the refusal names the
    # first assets to redo, the raw ones (code versions chain, so validation_split's follows theirs)
    ("val_fraction", _set("split", "val_fraction", 0.05), _after("validation_split"), "raw/stories"),
    ("val_fraction", _set("split", "val_fraction", 0.05), _down("manifest"), "raw/stories"),
    # the manifest writes the mix's name and its config into the revision: an edit of either, then
    # published_revision alone, must not publish the old manifest as if the current config had built it
    ("name", _set_top("name", "demo_mix_renamed"), dg.AssetSelection.assets("published_revision"), "manifest"),
    # the control: a field no artifact's bytes depend on (how many reject samples the UI shows) is not
    # refused; the revision it publishes says 8, and a from-scratch build with 8 gives the same one
    ("samples_per_reason", _set("dedup", "samples_per_reason", 8), _down("manifest"), None),
]


def _sel_name(sel) -> str:
    return "manifest*" if sel == _down("manifest") else "partial"


@pytest.fixture
def built(built_demo) -> tuple[Path, Path]:
    """The demo built once (demo.yaml, its corpus, storage, published target) and a pristine copy of it: the
    session's build (support/built_demo.py), which other modules start from too."""
    return built_demo.work, built_demo.pristine


def _restore(built: tuple[Path, Path]) -> Path:
    """The built demo as it was after its build, at the same paths (the paths are part of the config: a copy
    elsewhere would be another config for every source), so each case starts from it alone."""
    work, pristine = built
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work, symlinks=True)
    return work / "demo.yaml"


def _fingerprint(tmp: Path, rev: str) -> str:
    return json.loads((tmp / "published" / rev / "manifest.json").read_text())["fingerprint"]


@pytest.mark.parametrize("name,edit,selection,stale", CASES,
                         ids=[f"{c[0]}-{_sel_name(c[2])}" for c in CASES])
def test_a_config_edit_then_a_partial_selection_is_refused_or_reproducible(built, name, edit, selection, stale):
    cfg = _restore(built)
    case = cfg.parent
    before, pointed = published(case), latest(case)
    d = yaml.safe_load(cfg.read_text())
    edit(d, case)
    cfg.write_text(yaml.safe_dump(d, sort_keys=False))

    run = materialize(cfg, dg.DagsterInstance.ephemeral(), selection)
    if not run.success:  # (a) refused, naming what to re-materialise
        msg = failures(run)
        assert stale is not None and REDO in msg, f"failed, but not refused naming what to re-materialise: {msg}"
        assert "refuses inputs" in msg and f"{stale} was materialised under another config or code" in msg, msg
        assert stale in msg.split(REDO)[1].split(" (then ")[0].split(", "), msg
        assert not run.get_asset_materialization_events()
        assert published(case) == before and latest(case) == pointed
        return
    # (b) published: the revision's config is the edited one and a from-scratch build of it reproduces it
    assert run.success, f"neither refused nor published: {failures(run)}"
    rev = json.loads(latest(case))["revision"]
    assert rev not in before, "the run succeeded without publishing the edited config"
    config = json.loads((case / "published" / rev / "review" / "mix_config.json").read_text())
    assert config == json.loads(review_config_json(load_spec(cfg).model_dump(mode="json")))
    got = _fingerprint(case, rev)
    for d in ("storage", "cache", "published"):  # from scratch, at the same paths (they are in the config)
        shutil.rmtree(case / d, ignore_errors=True)
    scratch = materialize(cfg, dg.DagsterInstance.ephemeral())
    assert scratch.success, f"published, but a from-scratch build of its config fails: {failures(scratch)}"
    assert json.loads(latest(case))["fingerprint"] == got


# -- every config field an asset reads is in the code_version of it or of an asset upstream of it ------------
# Fields read that no artifact's bytes depend on, so they are in no code_version on purpose:
NOT_IN_BYTES = {
    # where and how the work runs, never what it computes (every engine, thread count and root: the same bytes)
    "config_path", "storage.root", "storage.cache_dir", "engine.num_cpus", "audit.threads", "dedup.threads",
    "packing.threads",  # the tokenizer threads (RAYON_NUM_THREADS): the same ids
    "dedup.partitions",  # dedup_keys' reduce in node partitions (stages/dedup/partitioned.py): the same table
    # dedup_keys' MinHash signatures, which contamination_report's scan writes as it goes: a cache keyed by
    # content and these parameters (stages/dedup/signatures.py), not one of its outputs
    "contamination_report:dedup.shingle_words", "contamination_report:dedup.num_perm",
    "contamination_report:dedup.threshold", "contamination_report:dedup.lsh_fp_weight",
    "contamination_report:dedup.lsh_fn_weight",
    # the reject samples document_filters shows in the UI are scrubbed of eval items (metadata, not files)
    "document_filters:audit.scrub_words", "document_filters:audit.tasks",
    # a source's own name looks its section up; another name is another asset (raw/<name>)
    "sources.name",
    # raw/<source> reads whether the language filter is on to know whether its filters are active (the budget's
    # keep_share): with other filters on, as in the demo, it changes nothing
    "raw/encyclopedia:filters.language.enabled", "raw/math:filters.language.enabled",
    "raw/python_reference:filters.language.enabled", "raw/stories:filters.language.enabled",
    # read to judge a check or shown as metadata (tokenizer's separator_in_vocab)
    "tokenizer:packing.separator",
    "dedup.max_loss_share_warn", "dedup.samples_per_reason", "audit.source_rate_warn", "filters.samples_per_filter",
}


def _ignored(asset: str, path: str) -> bool:
    """Whether `path` (a field read by `asset`) is in NOT_IN_BYTES (a list index is any task's)."""
    generic = ".".join(p for p in path.split(".") if not p.isdigit())
    return any(k in NOT_IN_BYTES for k in (path, generic, f"{asset}:{generic}")) or any(
        f"{asset}:{generic}".startswith(k + ".") or generic.startswith(k + ".") for k in NOT_IN_BYTES)


def _sections(obj, path=()):
    """(path, section) of every config section in the spec tree (lists of sections included)."""
    if isinstance(obj, Strict):
        yield path, obj
        for name in type(obj).model_fields:
            yield from _sections(object.__getattribute__(obj, name), (*path, name))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _sections(v, (*path, i))


def _replace(obj, path, field, value):
    if not path:
        return obj.model_copy(update={field: value})
    head, rest = path[0], path[1:]
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace(v, rest, field, value) if i == head else v for i, v in enumerate(obj))
    return obj.model_copy(update={head: _replace(getattr(obj, head), rest, field, value)})


def _other(value):
    """Another value of the same type, or None when there is no obvious one."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value * 2 + 1  # enough to move a budget rounded from it
    if isinstance(value, float):
        return value / 2 if value else 0.5
    if isinstance(value, str):
        return value + "_edited"
    if isinstance(value, (list, tuple)) and value and not isinstance(value[0], Strict):
        return type(value)(list(value) + list(value[:1]))
    return None


def _dumped_fields(section, exclude) -> list:
    """(section, field) of every field a `model_dump` of `section` writes (its `exclude` set's top-level names
    and the fields excluded from every dump left out), nested sections included."""
    out = []
    for name, info in type(section).model_fields.items():
        if info.exclude or (isinstance(exclude, (set, frozenset, dict)) and name in exclude):
            continue
        out.append((section, name))
        for _, sub in _sections(object.__getattribute__(section, name)):
            out += [(sub, n) for n, i in type(sub).model_fields.items() if not i.exclude]
    return out


def test_every_field_an_asset_reads_changes_its_code_version_or_an_upstream_one(built, monkeypatch):
    """Each asset materialised alone over a built demo (with its checks: one step), every read of a config
    field traced to the field's path in the spec; then each field of the spec is changed:
    * under-marking: for a field an asset reads, some code_version on the asset's chain (its own or an
      upstream asset's) must change, or consumers would accept an artifact computed under the old value;
    * over-marking: an asset's code_version (chained: its own and its parents') may change only when the
      asset or one upstream of it reads the field, or the UI would mark it Unsynced for an edit that changes
      none of its bytes (here a `model_dump` of a section counts as reading every field it writes: the
      manifest publishes the config so dumped).
    A read of a section built on the fly (a source's merged filters) counts for every section of its class
    in the spec. NOT_IN_BYTES aside."""
    cfg = _restore(built)  # the demo built whole (each asset below then runs alone over that build)
    spec = load_spec(cfg)
    defs = build_definitions(spec)
    instance = dg.DagsterInstance.ephemeral()
    # the resource's parse of the config (cached per file version, resources._parsed), as a full build here left
    # it: parsing validates every field, which the trace below would otherwise lay at the first asset's door
    assert defs.resources["mix"].spec == spec

    reads: dict[str, set] = {}
    dumped: dict[str, set] = {}  # the fields of the sections each asset dumps (an allowance, for over-marking)
    paths: dict[int, tuple] = {}  # id of a section of a MixSpec the run reads -> its path in the spec
    current: list = [None]

    def read(section, name, into: dict) -> None:
        asset = current[0]
        current[0] = None  # not while registering
        if isinstance(section, MixSpec) and id(section) not in paths:
            paths.update({id(sec): p for p, sec in _sections(section)})
        current[0] = asset
        into[asset].add((paths.get(id(section)), type(section), name))

    def traced(self, name):
        if current[0] is not None and name in type(self).model_fields:
            read(self, name, reads)
        return object.__getattribute__(self, name)

    dump, dump_json = Strict.model_dump, Strict.model_dump_json

    def traced_dump(original):
        def run(self, *args, **kwargs):
            if current[0] is not None:
                asset, current[0] = current[0], None
                fields = _dumped_fields(self, kwargs.get("exclude"))
                current[0] = asset
                for sec, name in fields:
                    read(sec, name, dumped)
            return original(self, *args, **kwargs)
        return run

    graph = defs.resolve_asset_graph()
    # every asset computes (a reused artifact reads no field), so the trace sees what a computation reads
    monkeypatch.setenv(NO_REUSE_ENV, "1")
    monkeypatch.setattr(Strict, "__getattribute__", traced)
    monkeypatch.setattr(Strict, "model_dump", traced_dump(dump))
    monkeypatch.setattr(Strict, "model_dump_json", traced_dump(dump_json))
    for key in graph.toposorted_asset_keys:
        name = key.to_user_string()
        reads[name], dumped[name] = set(), set()
        current[0] = name
        run = dg.materialize(list(defs.assets), resources=defs.resources, instance=instance,
                             selection=dg.AssetSelection.assets(key), raise_on_error=False)
        current[0] = None
        assert run.success, (name, failures(run))
    monkeypatch.undo()

    def versions(s) -> dict[str, str]:
        g = build_definitions(s).resolve_asset_graph()
        return {k.to_user_string(): g.get(k).code_version for k in g.get_all_asset_keys()}

    now = versions(spec)
    upstream: dict[str, set] = {}
    for k in graph.toposorted_asset_keys:
        n = k.to_user_string()
        upstream[n] = {n}.union(*(upstream[p.to_user_string()] for p in graph.get(k).parent_keys))
    tree = list(_sections(spec))
    edited_versions: dict[tuple, dict | None] = {}

    def edited(p, field) -> dict | None:
        """The code_versions with field `field` of the section at `p` changed (None: no other valid value)."""
        if (p, field) not in edited_versions:
            section = next(sec for q, sec in tree if q == p)
            other = _other(object.__getattribute__(section, field))
            out = None
            if other is not None:
                try:  # only a value the config accepts (a loader's kind is a tag, not a free string)
                    type(section).model_validate({**section.model_dump(), field: other})
                    out = versions(_replace(spec, p, field, other))
                except Exception:  # a value the config or the definitions refuse: nothing is built from it
                    pass
            edited_versions[(p, field)] = out
        return edited_versions[(p, field)]

    readers: dict[tuple, set] = {}

    def where(path, cls) -> list:
        return [path] if path is not None else [p for p, sec in tree if type(sec) is cls]

    for asset in reads:
        for path, cls, field in reads[asset] | dumped[asset]:
            for p in where(path, cls):
                readers.setdefault((p, field), set()).add(asset)
    uncovered = set()
    for asset, fields in sorted(reads.items()):
        for path, cls, field in fields:
            for p in where(path, cls):
                dotted = ".".join(map(str, (*p, field)))
                if _ignored(asset, dotted):
                    continue
                ed = edited(p, field)
                if ed is not None and all(ed.get(a) == now[a] for a in upstream[asset]):
                    uncovered.add(f"{asset} reads {dotted}")
    assert not uncovered, "\n".join(sorted(uncovered))

    overmarked = set()
    for p, sec in tree:
        for field in type(sec).model_fields:
            ed = edited(p, field)
            if ed is None:
                continue
            who = readers.get((p, field), set())
            dotted = ".".join(map(str, (*p, field)))
            overmarked |= {f"{a}'s code_version changes with {dotted}, which neither it nor an asset upstream reads"
                           for a in now.keys() & ed.keys() if ed[a] != now[a] and not upstream[a] & who}
    assert not overmarked, "\n".join(sorted(overmarked))
