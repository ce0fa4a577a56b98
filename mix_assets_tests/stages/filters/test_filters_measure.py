"""stages/filters/cascade.py `measure` and stages/filters/decisions.py `explain`: the figure each rule compares with its threshold,
shown beside a rejected sample (`gopher_quality:alpha_words 0.78 < 0.80`). The figure must be the one the
decision used: on every document, a rule fires exactly when its measured value passes its threshold."""

from __future__ import annotations

import operator
import random

import pytest

from mix_assets.stages.filters import decisions, cascade
from mix_assets.stages.filters import metadata as filters_md
from mix_assets_tests.stages.filters.test_filters import GOOD, UNIQUE

_OPS = {"<": operator.lt, ">": operator.gt}
_PIECES = [
    lambda r: GOOD,
    lambda r: " ".join(r.choice(UNIQUE) for _ in range(r.randint(3, 80))),
    lambda r: "\n".join(["- item one", "- item two", "• item three"] * r.randint(1, 5)),
    lambda r: "And then... " * r.randint(1, 30),
    lambda r: "#tag #more " * r.randint(1, 20),
    lambda r: "12 34 56 78 90 !! ?? " * r.randint(1, 10),
    lambda r: "Lorem ipsum dolor sit amet, the of and to be.",
    lambda r: "function f() { return 1; } the of and that.",
    lambda r: "the same line repeats here.\n" * r.randint(1, 8),
    lambda r: "a\x01b\x02c\x03 " * r.randint(0, 4),
    lambda r: "Extraordinarily incomprehensible characteristically " * r.randint(1, 5),
    lambda r: "",
    lambda r: "Short.",
    lambda r: "\n\n".join(["The paragraph of the mill and the town."] * r.randint(1, 4)),
]


def _corpus(n: int = 300, seed: int = 5) -> list[str]:
    r = random.Random(seed)
    return ["\n".join(r.choice(_PIECES)(r) for _ in range(r.randint(1, 6))) for _ in range(n)]


def test_every_rule_fires_exactly_when_its_measured_figure_passes_its_threshold():
    texts = _corpus()
    res = cascade.apply_filters(texts)
    got = cascade.measure(texts)
    assert len(got) == len(texts) and set(got[0]) == set(res.failed)
    compared = {r: 0 for r in res.failed}
    for i, per_rule in enumerate(got):
        for rule, m in per_rule.items():
            fired = bool(res.failed[rule][i])
            if m.value is None or m.threshold is None:  # a yes/no rule, or a ratio of nothing (never fires)
                assert m.threshold is None or not fired, (i, rule, m)
                continue
            assert _OPS[m.op](m.value, m.threshold) == fired, (i, rule, m, texts[i][:80])
            compared[rule] += 1
    fired_rules = {r for r in res.reason if r}
    assert len(fired_rules) >= 8, fired_rules  # the corpus exercises many rules, not one
    assert all(compared[r] for r in fired_rules if cascade.thresholds(cascade.FilterConfig())[r][1] is not None)


def test_the_shown_figure_reads_like_the_rule():
    assert str(cascade.Measure("gopher_quality:alpha_words", 0.78, "<", 0.8)) == "gopher_quality:alpha_words 0.78 < 0.80"
    assert str(cascade.Measure("gopher_quality:min_doc_words", 12.0, "<", 50)) == "gopher_quality:min_doc_words 12 < 50"
    assert str(cascade.Measure("fineweb:char_dup_ratio", 0.0134, ">", 0.01)) == "fineweb:char_dup_ratio 0.013 > 0.010"
    assert str(cascade.Measure("sanity:binary", None, "", None)) == "sanity:binary"


def test_explain_names_the_measured_figure_of_each_picked_rejection():
    texts = {"a": "Short.", "b": "12 34 56 78 90 !! ?? " * 20, "k": GOOD}
    params = {"web": decisions.FilterParams(cascade.FilterConfig())}
    res = cascade.apply_filters(list(texts.values()))
    picked = [("web", r.split(":")[0], d, r) for d, r in zip(texts, res.reason) if r] + [("web", "kept", "k", "")]
    why = decisions.explain(picked, texts, params)
    assert set(why) == {"a", "b"}  # kept documents have nothing to explain
    for _, _, d, rule in picked[:-1]:
        m = cascade.measure([texts[d]])[0][rule]
        assert why[d] == str(m) and why[d].startswith(rule + " ") and m.op in why[d], why
    rows, _ = filters_md.sample_rows(picked, texts, __import__("numpy").zeros(0, "uint64"), 8, why)
    assert [r["reason"] for r in rows] == [why["a"], why["b"], ""]


@pytest.mark.parametrize("reason", ["language_score", "language:fr"])
def test_explain_language_rules(reason):
    texts = {"d": "Le chat est sur la table et le chien dort dans le jardin depuis ce matin."}
    params = {"web": decisions.FilterParams(cascade.FilterConfig.only(), languages=("en",), language_filter=True)}
    why = decisions.explain([("web", "language", "d", reason)], texts, params)["d"]
    assert why.startswith(reason + " ")
    assert ("≤ 0.65" in why) if reason == "language_score" else ("wanted: en" in why and "score" in why)
