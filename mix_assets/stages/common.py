"""The asset kit every stages/<stage>/assets.py uses (Dagster side): raw asset keys and lineage names, the
derived code_version, verified inputs and recorded lineage, artifact keys and their reuse from the object
store (`reused`, core/keys.py, core/objects.py), a checkout's inputs restored by the current config's keys
(`checkout_inputs`, core/checkout.py), gates (`gate`, `@gated`, the failure summary naming what
was held back) and the run lease (`run_lock`)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Optional

import dagster as dg
from pydantic import BaseModel
from dagster._core.definitions.metadata import normalize_metadata  # MaterializeResult's own normalisation

from mix_assets.console import metadata as md
from mix_assets.core import imports, keys, layout, lineage, objects, runlock
from mix_assets.core.storage import Storage, local_key_path
from mix_assets.stages.publish import publish as pub
from mix_assets.stages.publish.target import PUBLISHED_REVISION, write_target


# The engine resource is bound on the assets that map over chunks (resource_defs), so that a
# `materialize(..., resources={"mix": ...})` needs nothing more; Dagster 1.13 marks that parameter beta and
# would print the warning at every code-location load (the README promises a start without warnings).
warnings.filterwarnings("ignore", message=r"Parameter `resource_defs` of function `asset` is currently in beta")


def raw_key(source: str) -> dg.AssetKey:
    return dg.AssetKey(["raw", source])


def code_version(module: str, *config: object) -> str:
    """The code_version of an asset defined in `module` (its `__name__`) that reads the values `config`.

    The code is derived, not listed: the source of `module` and of every project module it imports,
    transitively (core/imports.py, read once per process); the config values (sections, fields: data)
    are hashed by their repr (config models by their JSON dump: `_config_text`). An edit to any code the asset runs, or to a value it reads, marks it
    stale in the UI, and consumers refuse its older lineage records (core/lineage.py).
    """
    for p in config:
        if inspect.ismodule(p) or inspect.isfunction(p) or inspect.isclass(p):
            raise TypeError(f"code_version({module!r}, ...): {p!r} is code, which is derived from the module's "
                            "imports; pass only the config it reads")
    h = hashlib.sha256(imports.source_version(module).encode())
    for p in config:
        h.update(_config_text(p).encode())
    return h.hexdigest()[:12]


def _config_text(p: object) -> str:
    """A config value as code_version hashes it: a config model (or a list of them) by its JSON dump, which is
    what the published config holds, without the operational fields it leaves out (threads, partitions, the
    encoder backend): a revision's own config then re-derives every code version; anything else by repr."""
    if isinstance(p, BaseModel):
        return p.model_dump_json()
    if isinstance(p, (list, tuple)) and any(isinstance(x, BaseModel) for x in p):
        return "[" + ", ".join(map(_config_text, p)) + "]"
    return repr(p)


def chain_code_versions(assets: list) -> list:
    """`assets` (AssetsDefinitions and checks, as the Definitions get them) with each asset's code_version
    chained: hash(its own code_version, each parent's chained one), parents by key in sorted order; an asset
    without a parent among `assets` keeps its own. Computed once, when the definitions are built.

    Why: Dagster (1.13, CachingStaleStatusResolver) marks an asset stale for a new code_version of its own or
    a new data version of a parent, never for a parent's new code_version; a config edit would mark only the
    assets reading the field until they are re-materialised. Chained, an edit changes the code_version of
    every asset downstream of a reader: the UI's Unsynced set is exactly the assets whose artifacts the edit
    changes (and empty for an edit that changes nothing). Consumers refuse records of another code_version
    (core/lineage.py), so a descendant's record counts as stale with its upstream's.
    """
    own: dict[dg.AssetKey, str | None] = {}
    parents: dict[dg.AssetKey, list[dg.AssetKey]] = {}
    for a in assets:
        for spec in getattr(a, "specs", ()):
            own[spec.key] = spec.code_version
            parents[spec.key] = sorted({d.asset_key for d in spec.deps}, key=lambda k: k.to_user_string())
    chained: dict[dg.AssetKey, str | None] = {}

    def version(key: dg.AssetKey, path: tuple = ()) -> str | None:
        if key not in chained:
            if key in path:
                raise ValueError(f"asset graph has a cycle through {key.to_user_string()}")
            ups = [p for p in parents[key] if p in own]
            if own[key] is None or not ups:
                chained[key] = own[key]
            else:
                h = hashlib.sha256(own[key].encode())
                for p in ups:
                    h.update(f"\n{p.to_user_string()}={version(p, (*path, key))}".encode())
                chained[key] = h.hexdigest()[:12]
        return chained[key]

    for key in own:
        version(key)
    return [a.map_asset_specs(lambda s: s.replace_attributes(code_version=chained[s.key]))
            if isinstance(a, dg.AssetsDefinition) and a.specs and not isinstance(a, dg.AssetChecksDefinition)
            else a for a in assets]


def demo_corpus_parts(spec) -> tuple:
    """The embedded demo corpus's settings when the spec generates it (its files are what raw/<source> and
    eval_registry read), for their code_version; nothing otherwise."""
    return (spec.demo_corpus.model_dump_json(),) if spec.demo_corpus else ()


def raw_name(source: str) -> str:
    """The lineage name of `raw/<source>` (its asset key as the UI writes it)."""
    return f"raw/{source}"


def current_code_versions(context) -> dict[str, str]:
    """Every asset's code_version in the current definitions, by lineage name (`raw/web`, `manifest`).

    From the graph the run's job was built from (the whole code location's, whatever the selection):
    a step's subset job holds only the selected assets and their direct parents."""
    graph = context.job_def.asset_layer.asset_graph.source_asset_graph
    out = {}
    for key in graph.get_all_asset_keys():
        version = graph.get(key).code_version
        if version is not None:
            out[key.to_user_string()] = version
    return out


def verified_inputs(storage: Storage, consumer: str, inputs: list[str], context) -> dict[str, str]:
    """Data versions of `inputs` once lineage proves they belong together, each computed under its
    asset's current code_version (so under the current config); a dg.Failure names what to redo."""
    versions = current_code_versions(context)
    try:
        return lineage.verify_inputs(storage, consumer, inputs, code_versions=versions)
    except lineage.StaleInputError as first:
        e = first
    # the checkout holds another config's artifacts (another run wrote it since): the current config's are
    # restored from the keyed store by their keys when they were built before, never taken from another config
    if checkout_inputs(storage, inputs, versions, context.log.info):
        try:
            return lineage.verify_inputs(storage, consumer, inputs, code_versions=versions)
        except lineage.StaleInputError as again:
            e = again
    raise dg.Failure(
        description=str(e),
        metadata={"stale_assets": ", ".join(e.rematerialise) or "none",
                  "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in e.problems))},
        allow_retries=False,
    ) from None


def restore_inputs(storage: Storage, inputs: list[str], context) -> list[str]:
    """`checkout_inputs` for a step that reads `inputs` without verifying them (fingerprint_reproduced): the
    current config's artifacts restored by key where the checkout holds another config's; nothing refused."""
    return checkout_inputs(storage, inputs, current_code_versions(context), context.log.info)


def recorded(storage: Storage, asset: str, outputs, inputs: dict[str, str], context,
             uses: Optional[Mapping[str, str]] = None) -> dict:
    """Write `asset`'s lineage record (last, after its files) with its current code_version (none for a
    check's record) and its artifact key; return the Dagster side of it.

    The result goes into `with_lineage(metadata, recorded(...))`: its data version (the artifact key, so a
    reused artifact keeps it and the UI marks children stale exactly when a key changes), what it was
    computed from, and what `with_lineage` files in the object store. `uses`: what else the artifact was
    made with that gc must keep while its keyed record stays (objects.write_keyed).
    """
    code = current_code_versions(context).get(asset)
    ikeys = _KEYS.pop((context.run.run_id, asset), None)  # what `reused` computed before the asset ran
    if ikeys is None and inputs:
        ikeys = input_keys(storage, inputs)
    rec = lineage.write_record(storage, asset, outputs, inputs, code, input_keys=ikeys)
    return {
        "data_version": dg.DataVersion((rec.get("key") or rec["data_version"])[:16]),
        "metadata": {"computed_from": dg.MetadataValue.json({k: v[:16] for k, v in rec["inputs"].items()})},
        "stash": {"storage": storage, "record": rec, "context": context, "uses": uses} if rec.get("key") else None,
    }


def with_lineage(result_metadata: dict, lineage_result: dict, **kwargs) -> dg.MaterializeResult:
    """A MaterializeResult carrying the asset's metadata plus its lineage (see `recorded`) and the step
    process's peak RSS (`md.peak_rss`: the step's own only when it has a process to itself).

    Every keyed artifact is filed here, once per materialisation: its files in the object store and a
    keyed record with this metadata and the check results (`reused` returns them on a hit)."""
    metadata = {**result_metadata, **lineage_result["metadata"]}
    if lineage_result.get("stash"):
        _stash(metadata, list(kwargs.get("check_results") or []), **lineage_result["stash"])
    return dg.MaterializeResult(
        metadata={**metadata, **md.peak_rss()},
        data_version=lineage_result["data_version"],
        **kwargs,
    )


# -- artifact keys and reuse -------------------------------------------------------------------------------
NO_REUSE_ENV = "MIX_NO_REUSE"  # "1": compute every asset (a full build's timing); artifacts are still filed
_KEYS: dict[tuple[str, str], dict[str, str]] = {}  # (run id, asset) -> the input keys `reused` computed

# Files an asset writes beyond its lineage record's outputs, filed and restored with them (manifest copies
# the review files into mix/review/ and writes the published config there).
EXTRA_OUTPUTS = {"manifest": (layout.MIX_DEDUP_KEYS, layout.MIX_EXCLUSION_MASKS, layout.MIX_CONTAMINATION_REPORT,
                              layout.MIX_CONFIG)}
# What an asset clears before it writes (read from its code: tokens/shards.py, tokens/tokenizer.py,
# manifest/builder.py): a restore clears the same, so no file of another key stays beside the restored ones.
OWNED_PREFIXES = {
    "tokenizer": (layout.TOKENIZER_FILE.rsplit("/", 1)[0] + "/",),
    "token_shards": (f"{layout.MIX_DIR}/train/", f"{layout.MIX_DIR}/val/", f"{layout.DOC_INDEX_DIR}/"),
}
CLEARS_MANIFEST = {"tokenizer", "token_shards"}  # the old manifest would describe other files
OPTIONAL_OUTPUTS = {"manifest": (layout.MIX_SCRUB_MANIFEST, layout.MIX_QUALITY_MODEL, layout.MIX_QUALITY_TRAINING_SET)}  # deleted when the restored outputs lack them


def input_keys(storage: Storage, inputs: Mapping[str, str], roots: Optional[Mapping[str, str]] = None) -> dict:
    """The artifact keys of `inputs` (from their lineage records; `data:<version>` for a record without a
    key, written by older code) and the `roots`' fingerprints of what is read from outside the root."""
    out = dict(roots or {})
    for name, version in inputs.items():
        rec = lineage.read_record(storage, name)
        out[name] = rec["key"] if rec and rec.get("key") else f"data:{version}"
    return out


def reused(context, mix, asset: str, inputs: Mapping[str, str],
           roots: Optional[Callable[[], Mapping[str, str]]] = None,
           recheck: Optional[Mapping[str, Callable[[dict], dg.AssetCheckResult]]] = None
           ) -> Optional[dg.MaterializeResult]:
    """The asset's MaterializeResult when its artifact key is already built, else None (compute it).

    Called right after the asset verified its `inputs` (lineage name -> data version); `roots` gives the
    fingerprints of what a root asset reads from outside the storage root. A hit: (a) the current lineage
    record has the key and its files still hash right, or (b) the keyed record and all its blobs exist
    and hash right: the outputs are restored into their working paths (atomically; what the asset would
    have cleared is cleared first) and the lineage record written. Either way the stored metadata and
    check results are returned, so gates evaluate as when the artifact was computed; `recheck` names the
    checks that look beyond the artifact (e.g. every file under audit/), evaluated again from the stored
    metadata (check name -> function of it). A blob that no longer hashes to its name is removed and the
    asset recomputes (saying why).
    """
    storage = mix.storage
    try:
        ikeys = input_keys(storage, inputs, roots() if roots else None)
    except (OSError, ValueError) as e:  # the asset's own read reports it properly
        context.log.info(f"{asset}: no artifact key ({type(e).__name__}: {e}); computing")
        return None
    _KEYS[(context.run.run_id, asset)] = ikeys
    if os.environ.get(NO_REUSE_ENV, "").strip().lower() in ("1", "true", "yes"):
        return None
    code = current_code_versions(context).get(asset)
    key = keys.artifact_key(asset, code, ikeys)
    stored = objects.read_keyed(storage, asset, key)
    if stored is None or stored.get("dagster") is None:
        return None
    got = restore(storage, asset, stored, dict(inputs), code, ikeys)
    if isinstance(got, str):
        context.log.warning(f"not reusing {asset} {key[:12]}: {got}; recomputing")
        return None
    outputs: dict[str, str] = stored["outputs"]
    restored = got
    _KEYS.pop((context.run.run_id, asset), None)
    run, created = stored.get("run_id") or "?", stored.get("created") or "?"
    context.log.info(f"reused {asset} {key[:12]} (computed by run {run[:8]} at {created}): {len(outputs)} files, "
                     f"0 recomputed" + (f"; {restored} restored from the object store" if restored else ""))
    metadata, checks = _load_dagster(stored["dagster"])
    checks = [recheck[c.check_name](metadata) if recheck and c.check_name in recheck else c for c in checks]
    metadata["reused"] = dg.MetadataValue.json({"key": key, "computed_by_run": run, "created": created,
                                                "files": len(outputs), "restored": restored})
    metadata["computed_from"] = dg.MetadataValue.json({k: v[:16] for k, v in sorted(inputs.items())})
    return dg.MaterializeResult(metadata={**metadata, **md.peak_rss()}, data_version=dg.DataVersion(key[:16]),
                                check_results=checks or None)


def restore(storage: Storage, asset: str, stored: dict, inputs: Mapping[str, str], code: Optional[str],
            ikeys: Mapping[str, str]) -> "int | str":
    """Put the keyed record `stored` of `asset` in place in `storage` (the run's checkout): its files restored
    from the object store where they do not hash right (atomically; what the asset would have cleared is
    cleared first) and its lineage record written with `inputs` (lineage name -> data version). The number
    of files restored, or why it cannot be (a blob that no longer hashes to its name: removed)."""
    outputs: dict[str, str] = stored["outputs"]
    record_outputs = {k: v for k, v in outputs.items() if k not in EXTRA_OUTPUTS.get(asset, ())}
    cur = lineage.read_record(storage, asset)
    have = lineage.current_hashes(storage, list(outputs))
    wrong = [p for p, sha in outputs.items() if have[p] != sha]
    if not wrong and cur is not None and cur.get("key") == stored["key"]:
        return 0
    # an asset that owns folders (token_shards: mix/train, ...) gets them cleared and refilled whole, so
    # no file of another key stays there, even where the files it lists already hash right
    owned = OWNED_PREFIXES.get(asset, ())
    todo = sorted(set(wrong) | ({p for p in outputs if p.startswith(owned)} if owned else set()))
    problems = [(sha, why) for sha in sorted({outputs[p] for p in todo})
                if (why := objects.blob_problem(storage, sha))]
    if problems:
        for sha, _ in problems:  # a damaged blob goes, so the recomputed artifact files its bytes again
            storage.store.delete(objects.object_key(sha))
        return f"{problems[0][1]}{f' (and {len(problems) - 1} more)' if len(problems) > 1 else ''}"
    if asset in CLEARS_MANIFEST:
        storage.delete(layout.MANIFEST)
    for prefix in owned:
        storage.delete_prefix(prefix)
    for p in OPTIONAL_OUTPUTS.get(asset, ()):
        if p not in outputs:
            storage.delete(p)
    for p in todo:
        objects.restore_object(storage, outputs[p], p, verify=False)  # checked just above
    lineage.write_record(storage, asset, record_outputs, dict(inputs), code, input_keys=ikeys)
    return len(todo)


def checkout_inputs(storage: Storage, inputs: list[str], code_versions: Mapping[str, str],
                    log: Callable[[str], None]) -> list[str]:
    """Make `inputs` and everything upstream of them in `storage` (the run's checkout) the artifacts of the
    current config: an asset whose lineage record there is of another code_version, or was computed from
    other upstream keys (another run's config wrote the checkout since), is restored from the keyed store
    by the key the current config gives it: the keyed record of its current code_version whose input keys
    are the keys its inputs resolve to, upstream first. An artifact whose key cannot be told (none stored;
    a root with stored records of several external inputs, e.g. source files that changed between builds)
    is left as it is: `verify_inputs` then names what to re-materialise. Returns the assets restored.
    """
    memo: dict[str, Optional[str]] = {}
    done: list[str] = []

    def resolve(name: str) -> Optional[str]:
        """`name`'s artifact key in the checkout once it is the current config's, or None."""
        if name in memo:
            return memo[name]
        memo[name] = None  # records never cycle; a hand-edited one must not loop here
        cur = lineage.read_record(storage, name)
        cv = code_versions.get(name)
        if cv is None:  # not an asset of these definitions (a check's record): as it is
            memo[name] = cur.get("key") if cur else None
            return memo[name]
        if cur is not None and cur.get("code_version") == cv and cur.get("key"):
            ups = {u: k for u, k in (cur.get("input_keys") or {}).items() if u in code_versions}
            if all(resolve(u) == k for u, k in ups.items()):
                memo[name] = cur["key"]
                return memo[name]
        matches: dict[str, dict] = {}
        for rec in objects.keyed_records(storage, name):
            if rec.get("code_version") != cv or rec.get("dagster") is None:
                continue
            ikeys = rec.get("input_keys") or {}
            if all(resolve(u) == k for u, k in ikeys.items() if u in code_versions):
                matches.setdefault(rec["key"], rec)
        if len(matches) != 1:
            return None  # none stored, or several that differ in what is read from outside the root
        rec = next(iter(matches.values()))
        ikeys = rec.get("input_keys") or {}
        ups = {}
        for u in ikeys:  # its lineage inputs: the names in its input keys that have a record (not the roots')
            try:
                r = lineage.read_record(storage, u)
            except (ValueError, OSError):
                r = None
            if r is not None:
                ups[u] = r["data_version"]
        got = restore(storage, name, rec, ups, cv, ikeys)
        if isinstance(got, str):
            log(f"{name}: the current config's artifact {rec['key'][:12]} cannot be restored: {got}")
            return None
        done.append(name)
        log(f"{name}: restored the current config's artifact {rec['key'][:12]} (computed by run "
            f"{str(rec.get('run_id'))[:8]} at {rec.get('created')}) from the object store, {got} files; the "
            "checkout held another config's")
        memo[name] = rec["key"]
        return memo[name]

    for n in inputs:
        resolve(n)
    return done


# -- stored check results -----------------------------------------------------------------------------------
CHECK_RECORDS = objects.CHECK_RECORDS  # keyed/checks/<asset>/<check>/<key>.json: a check's stored result


def check_record_name(asset: str, check: str) -> str:
    return f"{CHECK_RECORDS}/{asset}/{check}"


def stored_check(context, storage: Storage, asset: str, check: str, version: str,
                 compute: Callable[[], "dg.AssetCheckResult | tuple[dg.AssetCheckResult, bool]"],
                 files: tuple[str, ...] = (), present: Optional[Callable[[], bool]] = None) -> dg.AssetCheckResult:
    """The result of `check` on `asset`, stored under the asset's artifact key and re-emitted when that key
    was checked before by the same check code; else `compute()`d and stored.

    Only for a check whose result is a pure function of the artifact's bytes (named by its key) and of
    `version` (the check's code_version: its module's code and the config it reads). `files`: what the
    check writes beside its result (restored with it, atomically, from the object store). `compute` may
    return (result, False) for a result that is not such a function (e.g. the files are missing): not
    stored. A stored failure is re-emitted failing; MIX_NO_REUSE=1 recomputes. `present`: whether the bytes
    the check reads are still the ones the key names (another run may have rewritten them since the asset's
    record was written); a stored result is re-emitted only when it says so. Not gated here: the caller's
    `gate()` applies to either result.
    """
    rec = lineage.read_record(storage, asset)
    akey = rec.get("key") if rec else None
    name = check_record_name(asset, check)
    key = keys.artifact_key(name, version, {asset: akey}) if akey else None
    if (key and os.environ.get(NO_REUSE_ENV, "").strip().lower() not in ("1", "true", "yes")
            and (present is None or present())):
        hit = _stored_result(context, storage, name, key, asset, akey, files)
        if hit is not None:
            return hit
    got = compute()
    result, store = (got, True) if isinstance(got, dg.AssetCheckResult) else got
    if key and store:
        try:
            outputs = {f: storage.sha256(f) for f in files}
            objects.stash(storage, name, key, outputs, input_keys={asset: akey}, code_version=version,
                          run_id=context.run.run_id, dagster=_dump_dagster({}, [result]))
        except Exception as e:  # noqa: BLE001 - a cache beside the result
            context.log.warning(f"{check}: result not filed in the object store ({type(e).__name__}: {e})")
    return result


def _stored_result(context, storage: Storage, name: str, key: str, asset: str, akey: str,
                   files: tuple[str, ...]) -> Optional[dg.AssetCheckResult]:
    stored = objects.read_keyed(storage, name, key)
    if stored is None or stored.get("dagster") is None or set(stored["outputs"]) != set(files):
        return None
    outputs = stored["outputs"]
    have = lineage.current_hashes(storage, list(outputs))
    todo = [p for p, sha in outputs.items() if have[p] != sha]
    for p in todo:
        if why := objects.blob_problem(storage, outputs[p]):
            context.log.warning(f"not reusing {name} {key[:12]}: {why}; recomputing")
            return None
    for p in todo:
        objects.restore_object(storage, outputs[p], p, verify=False)
    _, checks = _load_dagster(stored["dagster"])
    if len(checks) != 1:
        return None
    c = checks[0]
    run, created = stored.get("run_id") or "?", stored.get("created") or "?"
    check = name.rsplit("/", 1)[-1]
    note = (f"reused the {check} result of {asset} {akey[:12]} from run {run[:8]} at {created} (same artifact "
            f"key, same check code; {'passed' if c.passed else 'FAILED'} then)")
    context.log.info(note)
    return c._replace(metadata={**c.metadata, "reused": dg.MetadataValue.text(note)})


def _dump_dagster(metadata: dict, checks: list) -> Optional[str]:
    """The materialisation's metadata and check results in dagster's serdes (check results as their fields:
    AssetCheckResult itself is not serialisable); a value that does not serialise is left out, and named."""
    def norm(m: dict) -> tuple[dict, list[str]]:
        kept, dropped = {}, []
        for k, v in normalize_metadata(m or {}, allow_invalid=True).items():
            try:
                dg.serialize_value(v)
                kept[k] = v
            except Exception:  # noqa: BLE001 - not serialisable: not stored (and said so)
                dropped.append(k)
        return kept, dropped

    meta, dropped = norm({k: v for k, v in metadata.items() if k != "reused"})
    out_checks = []
    for c in checks:
        cm, cd = norm(c.metadata)
        dropped += [f"{c.check_name}:{k}" for k in cd]
        out_checks.append({"passed": c.passed, "check_name": c.check_name, "asset_key": c.asset_key,
                           "severity": c.severity.value, "description": c.description, "metadata": cm})
    if dropped:
        meta["not_stored_metadata"] = dg.MetadataValue.text(", ".join(dropped))
    return dg.serialize_value({"metadata": meta, "checks": out_checks})


def _load_dagster(text: str) -> tuple[dict, list[dg.AssetCheckResult]]:
    d = dg.deserialize_value(text)
    checks = [dg.AssetCheckResult(passed=c["passed"], check_name=c["check_name"], asset_key=c["asset_key"],
                                  severity=dg.AssetCheckSeverity(c["severity"]), description=c["description"],
                                  metadata=c["metadata"]) for c in d["checks"]]
    return dict(d["metadata"]), checks


def _stash(metadata: dict, checks: list, *, storage: Storage, record: dict, context,
           uses: Optional[Mapping[str, str]] = None) -> None:
    """File the artifact just recorded: its files as blobs, then keyed/<asset>/<key>.json (core/objects.py).
    A failure to file it is logged, never fails the asset (the artifact itself is complete)."""
    asset = record["asset"]
    try:
        outputs = dict(record["outputs"])
        for extra in EXTRA_OUTPUTS.get(asset, ()):
            if storage.exists(extra):
                outputs[extra] = storage.sha256(extra)
        objects.stash(storage, asset, record["key"], outputs, input_keys=record.get("input_keys") or {},
                      code_version=record.get("code_version"), run_id=context.run.run_id,
                      dagster=_dump_dagster(metadata, checks), uses=uses)
    except Exception as e:  # noqa: BLE001 - the object store is a cache beside the artifact
        context.log.warning(f"{asset}: not filed in the object store ({type(e).__name__}: {e})")


def held_back(context, key: dg.AssetKey) -> list[str]:
    """Every asset downstream of `key` that this run would have materialized (what a failed gate holds back)."""
    layer = context.job_def.asset_layer
    graph, planned = layer.asset_graph, layer.selected_asset_keys  # the run's subset of the job
    seen: set[dg.AssetKey] = set()
    todo = [key]
    while todo:
        for child in graph.get(todo.pop()).child_entity_keys:
            if isinstance(child, dg.AssetKey) and child not in seen:
                seen.add(child)
                todo.append(child)
    return sorted(k.to_user_string() for k in seen if k in planned)


HELD_BACK = "Held back (not run): "


def _held_note(names: list[str]) -> str:
    return f"{HELD_BACK}{', '.join(names)}." if names else "Nothing downstream in this run was held back."


def gate(context, key: dg.AssetKey, result: dg.AssetCheckResult) -> dg.AssetCheckResult:
    """A blocking check's result; when it fails with ERROR, its description names what it held back.

    The UI shows the skipped downstream assets as failed while the gated asset stays green, so the
    failing check itself says which assets did not run because of it. Idempotent.
    """
    if result.passed or result.severity != dg.AssetCheckSeverity.ERROR:
        return result
    note = _held_note(held_back(context, key))
    desc = result.description or ""
    if desc.endswith(note):
        return result
    return result._replace(description=f"{desc.rstrip('.')}. {note}" if desc else note)


LOCK_WAIT_ENV = "MIX_LOCK_WAIT_SECONDS"  # how long a publish waits for another run's lease
# Default 300 s: only publishing holds the lease (seconds per revision), so a second publisher waits its turn
# instead of failing a whole build; 0 fails at once naming the holder.
LOCK_WAIT_DEFAULT = 300.0
LOCK_TTL_ENV = "MIX_LOCK_TTL_SECONDS"  # a lease whose heartbeat is older than this is taken over


def _env_seconds(name: str, default: float, positive: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise dg.Failure(description=f"{name}={raw!r}: not a number of seconds", allow_retries=False) from None
    if value < 0 or (positive and value == 0):
        raise dg.Failure(description=f"{name}={raw!r}: must be {'> 0' if positive else '>= 0'}", allow_retries=False)
    return value


# The steps that hold the run lease. Every run writes its working files in a checkout no other live run uses
# (core/checkout.py, claimed by MixResource), and artifacts are filed in the shared store under their keys,
# written once, so tokenizer, token_shards and manifest need no lease: two runs of different configs build on
# one root side by side. What stays shared, and so serialised: the publish target. `published_revision` may
# write (or repair) the very revision another run is writing (same bytes, same name), and the gate moves
# `latest`, which must not go to a revision another run is still writing, nor move back and forth between two
# runs' read-backs: the lease makes "write revision, read it back as a stranger, move latest" one run's at a time.
LEASED_STEPS = frozenset({"published_revision", "published_readable_from_empty_cache"})


@contextlib.contextmanager
def run_lock(context, storage: Storage, step: str) -> Iterator[Optional[runlock.Lease]]:
    """Hold the storage root's run lease (core/runlock.py) for this step when it publishes or moves `latest`
    (`LEASED_STEPS`; other steps get None: they write only their run's checkout); a dg.Failure naming the
    holder when another run has it.

    A lease per step, not per run: Dagster has no hook at a run's end in every executor (the multiprocess
    executor starts a process per step), so a run-long lease could not be released when the run ends or
    fails, and the next run would wait for its TTL. The lease lives in the storage root (`storage.store`),
    whichever checkout the step works in.
    """
    if step not in LEASED_STEPS:
        yield None
        return
    store = storage.store
    who = runlock.owner(context.run.run_id, step)
    if not store.is_s3:  # the lease is written like a stage's files: never through a link out of the root
        local_key_path(store.root, runlock.LEASE_KEY)
    try:
        with runlock.holding(store.location, who, ttl=_env_seconds(LOCK_TTL_ENV, runlock.DEFAULT_TTL, positive=True),
                             wait_seconds=_env_seconds(LOCK_WAIT_ENV, LOCK_WAIT_DEFAULT), log=context.log.info) as lease:
            yield lease
    except (runlock.LeaseHeld, runlock.LeaseLost) as e:
        raise dg.Failure(description=str(e), allow_retries=False) from None


# -- one summary of a failed gate, where the run page shows it first ------------------------------
# A failed blocking check makes Dagster fail the step with "1 blocking asset check failed with ERROR
# severity: <asset>: <check>", and that message is what the run's RUN_FAILURE event (at the end of
# the run log, which the UI opens scrolled to) repeats. `gated` fails the step itself, after its
# results are recorded, with a summary instead: which gate, why, what was held back, what is still
# published. Nothing else changes: the check evaluations and the materialization are recorded
# first, and the step fails as it would have, so Dagster skips everything downstream.
FAILED_GATE_TAG = "mix/failed_gate"
STILL_PUBLISHED_TAG = "mix/still_published"


def gated(fn):
    """Decorate a step function (asset or asset check) whose gates go through `gate()`: a failed blocking
    gate fails the step with `gate_summary`'s text (dg.Failure) and tags the run with the gate and
    the revision still published (the Runs list shows user tags)."""

    @functools.wraps(fn)
    def step(context, *args, **kwargs):
        result = fn(context, *args, **kwargs)
        failed = failed_gates(context, result)
        if not failed:
            return result
        failure = gate_failure(context, failed, kwargs.get("mix"))  # every gated step takes `mix: MixResource`

        def results_then_failure():  # a returned generator: Dagster records what it yields, then the failure
            yield result
            raise failure

        return results_then_failure()

    return step


def failed_gates(context, result) -> list[tuple[dg.AssetCheckKey, dg.AssetCheckResult]]:
    """The results in `result` (a MaterializeResult or an AssetCheckResult) of blocking checks that failed
    with ERROR severity: the ones that make Dagster fail the step."""
    if isinstance(result, dg.MaterializeResult):
        results = list(result.check_results or [])
    elif isinstance(result, dg.AssetCheckResult):
        results = [result]
    else:
        return []
    specs = list(context.op_execution_context.assets_def.check_specs)
    out = []
    for r in results:
        if r.passed or r.severity != dg.AssetCheckSeverity.ERROR:
            continue
        spec = next((s for s in specs if (r.check_name in (None, s.name)) and r.asset_key in (None, s.asset_key)), None)
        if spec is not None and spec.blocking:
            out.append((spec.key, r))
    return out


def published_now(mix, held: list[str]) -> tuple[str | None, str]:
    """(the revision the publish target's `latest` names, or None; a sentence saying so). "Still
    published ... this run published nothing" only when the run held `published_revision` back."""
    if mix is None:
        return None, "Published revision: unknown (no mix resource)."
    url = mix.spec.resolve(mix.spec.publish.url)
    try:
        rev = pub.read_latest(write_target(mix.spec))
    except Exception as e:  # a summary must not hide the gate behind an unreadable target
        return None, f"Published revision: unknown ({url}/latest cannot be read: {type(e).__name__}: {e})."
    held_publish = PUBLISHED_REVISION in held
    if rev is None:
        return None, f"Nothing is published at {url} yet (no latest)."
    if held_publish:
        return rev, f"Still published: {rev} ({url}/latest); this run published nothing."
    return rev, f"Published now: {rev} ({url}/latest)."


def gate_summary(failed: list[tuple[dg.AssetCheckKey, str]], held: list[str], published: str) -> str:
    """'Gate <asset>:<check> failed: <why>. Held back (not run): <assets>. Still published: <revision> (...).'"""
    names = ", ".join(k.asset_key.to_user_string() + ":" + k.name for k, _ in failed)
    if len(failed) == 1:
        why = failed[0][1]
    else:
        why = "; ".join(f"{k.name}: {w}" for k, w in failed)
    head = f"Gate{'s' if len(failed) > 1 else ''} {names} failed" + (f": {why.rstrip('.')}." if why else ".")
    return f"{head} {_held_note(held)} {published}"


def gate_failure(context, failed: list[tuple[dg.AssetCheckKey, dg.AssetCheckResult]], mix) -> dg.Failure:
    """The step's failure for its failed gates (one summary; the run is tagged with the gates)."""
    key = failed[0][0].asset_key
    held = held_back(context, key)
    note = _held_note(held)
    whys = [(k, (r.description or "").removesuffix(note).strip()) for k, r in failed]
    rev, published = published_now(mix, held)
    summary = gate_summary(whys, held, published)
    gates = ", ".join(f"{k.asset_key.to_user_string()}:{k.name}" for k, _ in failed)
    run_id = context.run.run_id
    prev = (context.instance.get_run_by_id(run_id).tags or {}).get(FAILED_GATE_TAG)
    context.instance.add_run_tags(run_id, {FAILED_GATE_TAG: f"{prev}, {gates}" if prev else gates,
                                           STILL_PUBLISHED_TAG: rev or "none"})
    return dg.Failure(
        description=summary,
        metadata={"failed_gates": gates, "held_back": ", ".join(held) or "none",
                  "still_published": rev or "none"},
        allow_retries=False,
    )
