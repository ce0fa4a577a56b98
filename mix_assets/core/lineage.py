"""Content-hash lineage: every artifact records the hashes of what it was computed from.

Each asset writes, after its files, a record `lineage/<asset>.json`:

    {"format": ..., "asset": "dedup_keys",
     "outputs": {"dedup/dedup_keys.parquet": "<sha256>", ...},   # the files it wrote
     "data_version": "<sha256 over the sorted outputs>",
     "inputs": {"raw/web": "<data_version of raw/web it read>", ...},
     "code_version": "<the producing asset's code_version: its code and the config sections it reads>",
     "key": "<artifact key: core/keys.artifact_key(asset, code_version, input_keys)>",
     "input_keys": {"raw/web": "<the key of raw/web it read>", "files": "<fingerprint of files read from
                    outside the root, for a root>", ...}}

Before a consumer reads its inputs it calls `verify_inputs`: each direct input's files must still hash
to what its record says (a killed or hand-edited write is caught), and walking the records upstream,
every recorded input version must equal that input's current version. A source re-read since
`dedup_keys` was computed makes `dedup_keys` stale, and everything computed from it with it; the error
names the stale assets in the order to re-materialise them. So no selection of materialisations (a
refresh job, a partial selection in the UI, a retry) can combine artifacts computed from different
bytes. With `code_versions` (asset -> the code_version the current definitions give it), every record
reached must also carry that code_version: an artifact materialised under another config or code (a
field edited between runs, another run's config on the same root) is stale like a changed input, and a
record without one (older code) too. The record is written last: a run killed before it leaves the
old record, whose hashes no longer match the new files, so the half-done asset counts as changed,
never as current. A record carrying a `key` must also name what produced it: with `code_versions`, its key
must equal `artifact_key(asset, current code_version, its input_keys)` and each recorded input key the
key that input's record carries now (records without a key, from older code, are checked as before).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, Optional, Protocol

from mix_assets.core.keys import artifact_key

FORMAT = "mix_assets.lineage/1"
RECORD = "lineage/{asset}.json"  # = layout.LINEAGE


class Store(Protocol):
    """What lineage needs of `core/storage.Storage`."""

    def sha256(self, key: str) -> str: ...
    def exists(self, key: str) -> bool: ...
    def read_text(self, key: str) -> str: ...
    def write_text(self, key: str, text: str) -> None: ...


class StaleInputError(RuntimeError):
    """Inputs computed from different bytes than the ones now in storage (the message says what to redo)."""

    def __init__(self, consumer: str, problems: list[str], rematerialise: list[str]):
        self.consumer, self.problems, self.rematerialise = consumer, problems, rematerialise
        todo = ", ".join(rematerialise)
        super().__init__(
            f"{consumer} refuses inputs that do not belong together:\n  - " + "\n  - ".join(problems)
            + (f"\nRe-materialise, in this order: {todo} (then {consumer})." if todo else "")
        )


def record_key(asset: str) -> str:
    return RECORD.format(asset=asset)


def data_version(outputs: Mapping[str, str]) -> str:
    """sha256 over the sorted `key sha256` lines of an asset's files."""
    h = hashlib.sha256()
    for key in sorted(outputs):
        h.update(f"{key} {outputs[key]}\n".encode())
    return h.hexdigest()


def write_record(store: Store, asset: str, outputs: Iterable[str] | Mapping[str, str],
                 inputs: Mapping[str, str], code_version: Optional[str] = None, *,
                 input_keys: Optional[Mapping[str, str]] = None) -> dict:
    """Hash `outputs` (keys, or keys with their known sha256) and record them with the input versions
    and the code_version they were computed under (None: a record of no asset, e.g. a check's).
    `input_keys` given: the record also holds them and its artifact key (core/keys.py)."""
    if not isinstance(outputs, Mapping):
        outputs = {k: store.sha256(k) for k in outputs}
    rec = {"format": FORMAT, "asset": asset, "outputs": dict(sorted(outputs.items())),
           "data_version": data_version(outputs), "inputs": dict(sorted(inputs.items()))}
    if code_version is not None:
        rec["code_version"] = code_version
    if input_keys is not None:
        rec["input_keys"] = dict(sorted(input_keys.items()))
        rec["key"] = artifact_key(asset, code_version, input_keys)
    store.write_text(record_key(asset), json.dumps(rec, indent=1, sort_keys=True))
    return rec


def read_record(store: Store, asset: str) -> Optional[dict]:
    key = record_key(asset)
    if not store.exists(key):
        return None
    rec = json.loads(store.read_text(key))
    if rec.get("format") != FORMAT or rec.get("asset") != asset:
        raise ValueError(f"{key}: not a lineage record of {asset} (format {rec.get('format')!r})")
    return rec


def _short(v: Any) -> str:
    return str(v)[:12]


def verify_inputs(store: Store, consumer: str, inputs: Iterable[str], *, hash_files: bool = True,
                  code_versions: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The current data version of each input, once every input and its upstream chain is consistent.

    Raises `StaleInputError` naming each stale asset and what to re-materialise. `hash_files=False`
    trusts the direct inputs' records for their files (for callers that re-hash them anyway).
    `code_versions`: the current code_version of each asset; every record reached whose name is in it
    must carry exactly that one (names not in it, e.g. a check's record, are not versioned).
    """
    inputs = list(dict.fromkeys(inputs))
    records: dict[str, Optional[dict]] = {}

    def rec(name: str) -> Optional[dict]:
        if name not in records:
            records[name] = read_record(store, name)
        return records[name]

    problems: list[str] = []
    stale: set[str] = set()
    hashes = _current_hashes(store, [k for n in inputs if rec(n) for k in rec(n)["outputs"]]) if hash_files else {}
    for name in inputs:
        r = rec(name)
        if r is None:
            problems.append(f"{name} has no lineage record (never materialised, or its run did not finish); "
                            f"materialise {name}")
            stale.add(name)
            continue
        if hash_files:
            for key, want in r["outputs"].items():
                got = hashes[key]
                if got != want:
                    what = "is missing" if got is None else f"hashes to {_short(got)}, recorded {_short(want)}"
                    problems.append(f"{name}: {key} {what} (changed since {name} was materialised)")
                    stale.add(name)
                    break
    # Walk upstream: every recorded input version must be the input's current version, and every
    # record's code_version the one its asset has now.
    edges: dict[str, list[str]] = {}
    recoded: dict[str, tuple] = {}  # name -> (recorded, current) code_version, where they differ
    todo, seen = [n for n in inputs if rec(n) is not None], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        edges[name] = []
        if code_versions is not None and name in code_versions:
            want, got = code_versions[name], rec(name).get("code_version")
            if got != want:
                recoded[name] = (got, want)
                stale.add(name)
            elif rec(name).get("key") is not None:
                key_problem = _key_problem(name, rec(name), want)
                if key_problem:
                    problems.append(key_problem)
                    stale.add(name)
        for up, version in rec(name)["inputs"].items():
            edges[name].append(up)
            cur = rec(up)
            if cur is None:
                problems.append(f"{name} was computed from {up} {_short(version)}, which has no lineage record now")
                stale.add(name)
            elif cur["data_version"] != version:
                problems.append(f"{name} was computed from {up} {_short(version)}, but {up} is now "
                                f"{_short(cur['data_version'])} (re-materialised since)")
                stale.add(name)
            else:
                recorded_key = (rec(name).get("input_keys") or {}).get(up)
                if (code_versions is not None and rec(name).get("key") is not None and cur.get("key") is not None
                        and recorded_key != cur["key"]):
                    problems.append(f"{name} was computed from {up} key {_short(recorded_key)}, but {up} is now "
                                    f"key {_short(cur['key'])} (re-materialised since)")
                    stale.add(name)
                todo.append(up)
    problems += _code_problems(recoded, edges)
    if problems:
        _raise(consumer, problems, stale, edges, inputs)
    return {n: records[n]["data_version"] for n in inputs}


def _key_problem(name: str, r: dict, code_version: str) -> Optional[str]:
    """Why `r`'s artifact key is not the one its current code_version and recorded input keys give, or None."""
    want = artifact_key(name, code_version, r.get("input_keys") or {})
    if r["key"] == want:
        return None
    return (f"{name}'s artifact key {_short(r['key'])} is not the one its code_version and input keys give "
            f"({_short(want)}): a hand-edited or foreign record; re-materialise {name}")


def current_hashes(store: Store, keys: list[str]) -> dict[str, Optional[str]]:
    """sha256 of each key now (None when absent): what `verify_inputs` compares records with."""
    return _current_hashes(store, keys)


def _code_problems(recoded: Mapping[str, tuple], edges: Mapping[str, list[str]]) -> list[str]:
    """One line per record of another code_version, upstream first. An asset's code_version chains its
    parents' (stages/common.chain_code_versions), so below a changed asset every record differs too: those
    lines name the changed assets upstream rather than claim a config of their own changed."""
    def above(name: str) -> set[str]:
        out, todo = set(), list(edges.get(name, []))
        while todo:
            up = todo.pop()
            if up not in out:
                out.add(up)
                todo.extend(edges.get(up, []))
        return out

    ups = {n: above(n) & recoded.keys() for n in recoded}
    lines = []
    for name in sorted(recoded, key=lambda n: (len(ups[n]), n)):
        got, want = recoded[name]
        got = got if got is not None else "none (a record written by older code)"
        if ups[name]:
            first = ", ".join(sorted(u for u in ups[name] if not ups[u]) or sorted(ups[name]))
            lines.append(f"{name} was materialised before the config or code of {first} upstream changed "
                         f"(code_version {got}, current {want}: it chains its inputs'); re-materialise it after them")
        else:
            lines.append(f"{name} was materialised under another config or code: recorded code_version {got}, "
                         f"current {want}; re-materialise {name} with the current config")
    return lines


def _current_hashes(store: Store, keys: list[str]) -> dict[str, Optional[str]]:
    """sha256 of each key (None when absent), files hashed on a few threads: hashlib releases the GIL
    on large buffers, and a step's inputs (raw parquet, shards) are hundreds of MB at scale."""
    def one(key: str) -> Optional[str]:
        try:
            return store.sha256(key)
        except FileNotFoundError:
            return None

    keys = list(dict.fromkeys(keys))
    if len(keys) < 2:
        return {k: one(k) for k in keys}
    first = {keys[0]: one(keys[0])}  # on this thread: the store builds its (lazy) client once
    with ThreadPoolExecutor(min(len(keys) - 1, os.cpu_count() or 1, 4)) as pool:
        return {**first, **dict(zip(keys[1:], pool.map(one, keys[1:])))}


def _raise(consumer: str, problems: list[str], stale: set[str], edges: dict[str, list[str]],
           inputs: list[str]) -> NoReturn:
    """Everything between a stale asset and the consumer must be redone, upstream first."""
    order: list[str] = []
    needs: dict[str, bool] = {}

    def visit(name: str) -> bool:
        if name in needs:
            return needs[name]
        needs[name] = False  # a cycle cannot occur in records, but never loop on a hand-edited one
        redo = name in stale
        for up in edges.get(name, []):
            redo = visit(up) or redo
        needs[name] = redo
        if redo:
            order.append(name)
        return redo

    for n in inputs:
        visit(n)
    raise StaleInputError(consumer, problems, order)
