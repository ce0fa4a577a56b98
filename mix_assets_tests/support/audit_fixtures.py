"""A tiny mix with planted eval copies, and stand-ins for the assets around the audit.

The stand-ins (raw/<source>, exclusion_masks, validation_split) honour the layout contract
(core/layout.py), so the audit runs in a real Dagster graph on a corpus whose plants are known
exactly; `exclusion_masks` stands in for the dedup stage's asset (masks = contaminated docs when
`audit.mask_contaminated`), as that stage declares it.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from mix_assets.stages.audit.assets import CONTAMINATION_REPORT_KEY, EXCLUSION_MASKS_KEY
from mix_assets.config import MixSpec, load_spec
from mix_assets.core import layout
from mix_assets.core.storage import Storage
from mix_assets.resources import MixResource
from mix_assets_tests.support.tokens_fixtures import stamp

CANARY = "zqxvcanary"
EVAL_ROWS = [
    {"question": "Which instrument did the lighthouse keeper use to measure the pressure of the storm "
                 "approaching from the north?", "choices": ["a barometer", "a sextant"]},
    {"question": "Why did the baker leave the sourdough starter on the windowsill overnight before the "
                 "village fair began?", "choices": ["to keep it warm", "to let it ferment slowly"]},
    {"question": f"In the {CANARY} story, what did the quartermaster count beneath the swinging lantern "
                 "in the hold?", "choices": ["seventeen barrels of herring"]},
    {"question": "What colour were the shutters on the old mill house that stood beside the frozen "
                 "canal every winter?", "choices": ["green", "blue"]},
]

# Eval rows no loader may quote: GOOD_ROW, then one of these as row 2 of a validation.jsonl.
_C = CANARY.encode()
GOOD_ROW = b'{"question": "What tool measures air pressure in the old lighthouse?"}\n'
# case -> (second line of validation.jsonl, the field the error names or None)
BAD_ROWS = {
    "bad_json": (b'{"question": "' + _C + b' never closed\n', None),
    "huge_int": (b'{"question": "' + _C + b'", "n": ' + b"7" * 5000 + b"}\n", None),
    "deep_nesting": (b'{"question": "' + _C + b'", "d": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", None),
    "bad_utf8": (b'{"question": "' + _C + b' \xff\xfe"}\n', None),
    "lone_surrogate": (b'{"question": "' + _C + b' \\ud800"}\n', "question"),
    "not_text": (b'{"question": {"q": "' + _C + b'"}}\n', "question"),
    "not_an_object": (b'["' + _C + b'"]\n', None),
}

VOCAB = ("river stone window garden morning letter village harvest market bread candle road winter "
         "summer field horse wagon bell chapel meadow orchard cottage ladder basket lamp kettle").split()


def filler(rng: random.Random, n: int = 60) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n)) + "."


def recase(s: str) -> str:
    """Re-cased and re-punctuated copy: same words after normalisation."""
    out = []
    for i, w in enumerate(s.split()):
        w = w.upper() if i % 3 == 0 else w.capitalize() if i % 3 == 1 else w
        out.append(w + ("," if i % 5 == 4 else ""))
    return "  " + " ".join(out).replace("?", "!!") + " ..."


@dataclass
class Corpus:
    docs: dict[str, list[tuple[str, str]]]  # source -> [(doc_id, text)]
    planted: dict[str, set[str]]  # source -> doc ids holding an eval copy
    near: dict[str, set[str]] = field(default_factory=dict)  # source -> doc ids holding a one-word-edited copy


# EVAL_ROWS[1]'s second item with its 11th word changed: no 13 unchanged words in a row
NEAR_COPY = ("Why did the baker leave the sourdough starter on the windowsill yesterday before the village "
             "fair began? to let it ferment slowly")


def make_corpus(n_web: int = 40, n_books: int = 60, seed: int = 0, near_copy: bool = False) -> Corpus:
    rng = random.Random(seed)
    web = [(f"web-{i:04d}", filler(rng)) for i in range(n_web)]
    books = [(f"books-{i:04d}", filler(rng)) for i in range(n_books)]
    item = lambda r, c: f"{EVAL_ROWS[r]['question']} {EVAL_ROWS[r]['choices'][c]}"  # noqa: E731
    web[3] = (web[3][0], filler(rng) + " " + item(0, 0) + " " + filler(rng))
    web[7] = (web[7][0], filler(rng) + recase(item(1, 1)))
    web[11] = (web[11][0], recase(EVAL_ROWS[3]["question"]) + " " + filler(rng))  # stem only
    books[5] = (books[5][0], filler(rng) + " " + item(2, 0) + " " + filler(rng))
    near = {}
    if near_copy:  # only the fuzzy advisory sees this one
        books[8] = (books[8][0], filler(rng) + " " + NEAR_COPY + " " + filler(rng))
        near = {"books": {"books-0008"}}
    return Corpus(docs={"web": web, "books": books},
                  planted={"web": {"web-0003", "web-0007", "web-0011"}, "books": {"books-0005"}}, near=near)


def write_eval_task(folder: Path, rows=EVAL_ROWS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "test.jsonl").write_text(json.dumps({"question": f"TEST ONLY {CANARY} never read"}) + "\n")
    return folder


def write_card_repo(repo: Path, features: str, rows: list[dict]) -> Path:
    """A hub-layout folder: a dataset card declaring `features` (YAML lines), data/validation.parquet
    holding `rows` and a data/test.parquet that must never be read."""
    (repo / "data").mkdir(parents=True)
    (repo / "README.md").write_text(f"---\ndataset_info:\n  features:\n{features}---\n")
    pq.write_table(pa.table({k: [r[k] for r in rows] for k in rows[0]}), repo / "data" / "validation.parquet")
    pq.write_table(pa.table({"question": [f"TEST {CANARY}"]}), repo / "data" / "test.parquet")
    return repo


def make_spec(tmp_path: Path, mask: bool = True, tasks: list[dict] | None = None, **audit) -> MixSpec:
    evals = write_eval_task(tmp_path / "evals" / "demo_qa")
    data = {
        "name": "audit_test",
        "target_tokens": 100_000,
        "sources": [
            {"name": name, "loader": {"kind": "jsonl", "paths": [f"{name}.jsonl"]}, "text_field": "text",
             "license": "test", "rationale": "planted copies of eval items for the audit tests", "share": 0.5}
            for name in ("web", "books")
        ],
        "audit": {
            "tasks": tasks if tasks is not None else [
                {"name": "demo_qa", "dataset": {"kind": "local", "path": str(evals)}, "scored_split": "validation",
                 "audit_splits": ["validation"], "fields": ["question", "choices"], "min_rows": 4,
                 "note": "fixture"},
            ],
            "mask_contaminated": mask,
            **audit,
        },
        "storage": {"root": str(tmp_path / "storage")},
    }
    path = tmp_path / "mix.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(path)


def Res(spec: MixSpec) -> MixResource:  # noqa: N802 - reads like the resource it builds
    return MixResource(config_path=spec.config_path)


def write_docs(storage: Storage, source: str, docs: list[tuple[str, str]]) -> None:
    t = pa.table({"doc_id": [d for d, _ in docs], "source": [source] * len(docs), "text": [t for _, t in docs]})
    with storage.writing(layout.RAW_DOCS.format(source=source)) as tmp:
        pq.write_table(t, tmp)
    stamp(storage, f"raw/{source}", [layout.RAW_DOCS.format(source=source)])


def standins(spec: MixSpec, corpus: Corpus) -> list:
    return [*standin_raw(spec, corpus), *standin_masks(spec)]


def standin_raw(spec: MixSpec, corpus: Corpus) -> list:
    def raw_asset(name: str):
        @dg.asset(key=["raw", name])
        def raw(mix: MixResource):
            write_docs(mix.storage, name, corpus.docs[name])

        return raw

    return [raw_asset(s.name) for s in spec.sources]


def standin_masks(spec: MixSpec) -> list:
    """exclusion_masks (contaminated docs, when masking is on) and a downstream validation_split."""

    @dg.asset(key=EXCLUSION_MASKS_KEY, deps=[CONTAMINATION_REPORT_KEY])
    def exclusion_masks(mix: MixResource):
        storage = mix.storage
        bad = pq.read_table(storage.local_path(layout.CONTAMINATED_DOCS))
        if not spec.audit.mask_contaminated:
            bad = bad.slice(0, 0)
        t = pa.table({"doc_id": bad.column("doc_id"), "source": bad.column("source"),
                      "reasons": pa.array([["contaminated"]] * bad.num_rows, pa.list_(pa.string()))})
        with storage.writing(layout.EXCLUSION_MASKS) as tmp:
            pq.write_table(t, tmp)
        stamp(storage, "exclusion_masks", [layout.EXCLUSION_MASKS], ["contamination_report"])

    @dg.asset(key="validation_split", deps=[EXCLUSION_MASKS_KEY])
    def validation_split():
        return None

    return [exclusion_masks, validation_split]
