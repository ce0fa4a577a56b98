"""The embedded demo corpus: generated offline, deterministically, from a seed.

Four sources of readable English (encyclopedic entries, short stories, math word problems, and
the Python language reference shipped in the standard library's `pydoc_data`), one small eval
task (`demo_qa`, with a validation split and a test split that the audit must never open), and
planted cases for the gates:

- exact duplicates inside a source and across sources,
- near-duplicates made by small word edits (their 5-shingle Jaccard is recorded),
- verbatim and re-cased / re-punctuated copies of validation eval items pasted into documents.

What was planted is written to `ground_truth.json` beside the corpus, with each document named by
(source, origin) exactly as the raw source assets record it.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from mix_assets.core.transport import atomic_write_bytes

GENERATOR_VERSION = 4

_FIRST = """Ada Bram Cora Dario Elin Farid Greta Hugo Ines Jonas Kira Lev Mira Nils Orla Pavel Quinn Rosa
Soren Tala Umar Vera Wren Xavi Yara Zeno Amal Bodil Cyrus Dagny Emeka Freya Gideon Hana Ivo Jun Kofi
Lena Marek Noor Otto Pia Rafa Sana Tomas Ulla Viggo Wanda Yusuf Zita""".split()
_LAST = """Alder Birch Castell Dunmore Everly Fenwick Garrow Holt Ingram Jessop Kestrel Lindqvist Marlowe
Northcott Oakes Pell Quarry Rookwood Sallow Thorne Underhill Vance Whitlock Yardley Ashdown Brightwater
Colby Drummond Elsworth Fairbanks Greaves Hollis Ivers Kettering Langley Merriman""".split()
_PLACES = """Ashford Belmora Carran Dellwick Eastmere Fallow Glenrock Harrowgate Islay Juniper Kelso
Larchmont Marrow Netherby Ostrava Pellham Quillon Redwater Saltmarsh Thistleby Umberfield Valemont
Westbury Yarrow Zennor Brackwater Coldharbour Dunmere Eskdale Foxley""".split()
_THINGS = """lantern telescope loom compass kettle violin ledger barometer chisel quilt anchor bellows
sextant spindle harp forge tapestry millstone abacus lighthouse""".split()
_ADJ = """quiet ancient narrow bright stubborn gentle restless curious patient clever weathered
hidden crowded distant humble famous rusty golden wooden silver""".split()
_FIELDS = """botany astronomy geology navigation metallurgy cartography medicine architecture
linguistics hydrology weaving printing clockmaking glassblowing""".split()


def _name(r: random.Random) -> str:
    return f"{r.choice(_FIRST)} {r.choice(_LAST)}"


def _encyclopedia(r: random.Random) -> str:
    place, field, person = r.choice(_PLACES), r.choice(_FIELDS), _name(r)
    year = r.randint(1520, 1960)
    n = r.randint(2, 90) * 100
    sents = [
        f"{place} is a {r.choice(_ADJ)} town of about {n:,} people in the valley of the {r.choice(_PLACES)} river.",
        f"It became known for {field} after {person} opened a workshop there in {year}.",
        f"By {year + r.randint(5, 40)} the workshop employed {r.randint(3, 80)} apprentices and sold its {r.choice(_THINGS)}s as far as {r.choice(_PLACES)}.",
        f"The town hall, built of {r.choice(['granite', 'red brick', 'limestone', 'timber', 'slate'])} in {year + r.randint(-90, 90)}, still keeps the original {r.choice(_THINGS)}.",
        f"Historians such as {_name(r)} argue that the {r.choice(_ADJ)} climate shaped its trade more than any ruler did.",
        f"Each {r.choice(['spring', 'summer', 'autumn', 'winter'])} a fair in honour of {person} draws visitors from {r.randint(2, 30)} nearby villages.",
        f"The local school teaches {field} alongside {r.choice(_FIELDS)}, and its library holds {r.randint(200, 9000):,} volumes.",
        f"A railway reached {place} in {r.randint(1840, 1930)}, although the line closed {r.randint(20, 90)} years later.",
        f"Notable residents include the {r.choice(_ADJ)} painter {_name(r)} and the surveyor {_name(r)}.",
        f"The annual rainfall is close to {r.randint(400, 1900)} millimetres, most of it falling in {r.choice(['March', 'June', 'October', 'December'])}.",
    ]
    r.shuffle(sents)
    return " ".join(sents[: r.randint(6, 10)])


def _story(r: random.Random) -> str:
    a, b, place, thing = _name(r), _name(r), r.choice(_PLACES), r.choice(_THINGS)
    first_a, first_b = a.split()[0], b.split()[0]
    paras = [
        f"{a} had lived in {place} for {r.randint(2, 40)} years before the {r.choice(_ADJ)} {thing} arrived at her door.",
        f'"Where did you find it?" asked {first_b}, turning it over twice. "{r.choice(["It was in the attic", "A sailor left it", "My aunt sent it", "It fell off a cart"])}," said {first_a}.',
        f"That night the wind came down from the {r.choice(['hills', 'moor', 'harbour', 'forest'])} and rattled every shutter on {r.choice(_LAST)} Lane.",
        f"{first_b} counted {r.randint(3, 19)} {r.choice(['candles', 'footsteps', 'knocks', 'bells'])} before the {thing} began to glow a {r.choice(['faint blue', 'deep amber', 'pale green', 'soft red'])}.",
        f"In the morning they carried it to the {r.choice(_ADJ)} {r.choice(['baker', 'clockmaker', 'ferryman', 'schoolteacher'])}, who laughed and said it belonged to {r.choice(_PLACES)}.",
        f"Neither of them believed her, but {first_a} wrote the date, {r.randint(1, 28)} {r.choice(['May', 'August', 'November', 'February'])}, on the back of an envelope anyway.",
        f"Years later {first_b} would tell the story to {r.randint(2, 9)} grandchildren, changing the ending each time.",
    ]
    k = r.randint(4, len(paras))
    return "\n\n".join(paras[:k])


def _math_problem(r: random.Random) -> str:
    who, thing = _name(r).split()[0], r.choice(_THINGS)
    a, b, c = r.randint(2, 40), r.randint(2, 12), r.randint(1, 30)
    price = r.randint(2, 25)
    kind = r.randrange(3)
    if kind == 0:
        q = f"{who} makes {a} {thing}s each day for {b} days and gives away {c} of them. How many {thing}s does {who} keep?"
        s = f"{who} makes {a} * {b} = {a * b} {thing}s. After giving away {c}, {who} keeps {a * b} - {c} = {a * b - c}."
        ans = a * b - c
    elif kind == 1:
        q = f"A {thing} costs {price} dollars. {who} buys {a} of them and pays with {price * a + c} dollars. How much change does {who} get?"
        s = f"The {thing}s cost {price} * {a} = {price * a} dollars. The change is {price * a + c} - {price * a} = {c} dollars."
        ans = c
    else:
        q = f"{who} walks {a} kilometres on Monday and {b} more kilometres each following day. How far does {who} walk on the fourth day?"
        s = f"On the fourth day {who} walks {a} + 3 * {b} = {a + 3 * b} kilometres."
        ans = a + 3 * b
    return f"Question: {q}\nAnswer: {s} The answer is {ans}."


def _math(r: random.Random) -> str:
    return "\n\n".join(_math_problem(r) for _ in range(r.randint(3, 5)))


def _eval_item(r: random.Random, i: int) -> dict:
    person, place, field = _name(r), r.choice(_PLACES), r.choice(_FIELDS)
    thing = r.choice(_THINGS)
    q = (
        f"According to the chronicle kept by {person}, which {r.choice(_ADJ)} instrument did the guild of "
        f"{place} present to the visiting scholars of {field} during the {r.choice(['flood', 'harvest', 'frost', 'eclipse'])} "
        f"of year {r.randint(1100, 1900)} item {i}?"
    )
    choices = [thing] + r.sample([t for t in _THINGS if t != thing], 3)
    r.shuffle(choices)
    return {"id": f"demo-{i:04d}", "question": q, "choices": choices, "answer": choices.index(thing)}


def _near_dup(r: random.Random, text: str, rate: float) -> str:
    ws = text.split(" ")
    for _ in range(max(1, int(len(ws) * rate))):
        i = r.randrange(len(ws))
        op = r.randrange(3)
        if op == 0 and len(ws) > 10:
            del ws[i]
        elif op == 1:
            ws.insert(i, r.choice(_ADJ))
        else:
            ws[i] = r.choice(_ADJ)
    return " ".join(ws)


def _shingles(text: str, k: int = 5) -> set[tuple[str, ...]]:
    ws = re.sub(r"[^\w\s]", "", text.lower()).split()
    return {tuple(ws[i : i + k]) for i in range(max(1, len(ws) - k + 1))}


def jaccard(a: str, b: str) -> float:
    sa, sb = _shingles(a), _shingles(b)
    return len(sa & sb) / max(1, len(sa | sb))


def _python_reference_docs() -> list[tuple[str, str]]:
    import pydoc_data.topics as t

    return [(name, t.topics[name]) for name in sorted(t.topics)]


def generate(out: str | Path, seed: int = 7, docs_per_source: int = 400) -> dict:
    """Write the demo corpus under `out` and return the ground truth."""
    out = Path(out)
    r = random.Random(seed)
    gen = {"encyclopedia": _encyclopedia, "stories": _story, "math": _math}
    docs: dict[str, list[str]] = {name: [f(r) for _ in range(docs_per_source)] for name, f in gen.items()}
    truth: dict = {"seed": seed, "generator_version": GENERATOR_VERSION, "exact_dups": [], "near_dups": [],
                   "eval_copies": [], "docs_per_source": docs_per_source}

    def origin(source: str, idx: int) -> str:
        return f"{source}.jsonl:{idx + 1}"

    # Exact duplicates within a source and across sources (appended so existing lines keep their origin).
    n_dup = max(2, docs_per_source // 40)
    for name in gen:
        for _ in range(n_dup):
            i = r.randrange(docs_per_source)
            docs[name].append(docs[name][i])
            truth["exact_dups"].append([[name, origin(name, i)], [name, origin(name, len(docs[name]) - 1)]])
    for _ in range(n_dup):
        i = r.randrange(docs_per_source)
        docs["stories"].append(docs["encyclopedia"][i])
        truth["exact_dups"].append(
            [["encyclopedia", origin("encyclopedia", i)], ["stories", origin("stories", len(docs["stories"]) - 1)]]
        )
    # Near-duplicates by small word edits; their true 5-shingle Jaccard is recorded.
    for name in gen:
        for _ in range(max(4, docs_per_source // 20)):
            i = r.randrange(docs_per_source)
            edited = _near_dup(r, docs[name][i], rate=r.choice([0.005, 0.01, 0.02]))
            docs[name].append(edited)
            truth["near_dups"].append({
                "a": [name, origin(name, i)], "b": [name, origin(name, len(docs[name]) - 1)],
                "jaccard": round(jaccard(docs[name][i], edited), 4),
            })

    # The eval task: validation items are audited; the test split exists and must never be opened.
    # Eval copies go into documents that take part in no duplicate pair, so each plant tests one thing.
    planted = {tuple(x) for pair in truth["exact_dups"] for x in pair}
    planted |= {tuple(nd[k]) for nd in truth["near_dups"] for k in ("a", "b")}
    ev = random.Random(seed + 1)
    val = [_eval_item(ev, i) for i in range(60)]
    test = [_eval_item(ev, 1000 + i) for i in range(60)]
    for k, item in enumerate(val[:8]):
        verbatim = k % 2 == 0
        q = item["question"]
        text = q if verbatim else re.sub(r"[,?]", "", q).upper().replace(" OF ", " of -- ")
        name = ["encyclopedia", "stories"][k % 2]
        i = r.choice([j for j in range(docs_per_source) if (name, origin(name, j)) not in planted])
        planted.add((name, origin(name, i)))
        docs[name][i] = docs[name][i] + "\n\n" + text
        truth["eval_copies"].append({
            "source": name, "origin": origin(name, i), "task": "demo_qa", "item_id": item["id"],
            "kind": "verbatim" if verbatim else "recased_repunctuated",
        })

    for name, texts in docs.items():
        lines = "".join(json.dumps({"id": f"{name}-{i}", "text": t}) + "\n" for i, t in enumerate(texts))
        atomic_write_bytes(out / "sources" / f"{name}.jsonl", lines.encode())
    for name, text in _python_reference_docs():
        atomic_write_bytes(out / "sources" / "python_reference" / f"{name}.txt", text.encode())
    for split, items in (("validation", val), ("test", test)):
        lines = "".join(json.dumps(x) + "\n" for x in items)
        atomic_write_bytes(out / "evals" / "demo_qa" / f"{split}.jsonl", lines.encode())
    atomic_write_bytes(out / "ground_truth.json", json.dumps(truth, indent=1).encode())
    return truth


def ensure(out: str | Path, seed: int = 7, docs_per_source: int = 400) -> Path:
    """Generate the corpus unless an identical one is already complete; return its directory."""
    out = Path(out)
    stamp = json.dumps({"v": GENERATOR_VERSION, "seed": seed, "docs": docs_per_source})
    marker = out / ".complete"
    if marker.exists() and marker.read_text() == stamp:
        return out
    generate(out, seed, docs_per_source)
    atomic_write_bytes(marker, stamp.encode())  # written last: a killed generation is redone
    return out


def ensure_for_spec(spec) -> None:
    """Generate the embedded demo corpus when the mix spec uses it (idempotent, atomic)."""
    if spec.demo_corpus:
        dc = spec.demo_corpus
        ensure(spec.resolve(dc.path), dc.seed, dc.docs_per_source)
