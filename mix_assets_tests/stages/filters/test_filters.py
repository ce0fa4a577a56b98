"""stages/filters/cascade.py: every rule drops a hand-made document and keeps its neighbour just inside the rule.

Each rule is read from `failed[rule]` (all rules are evaluated on their own), so a document only has
to be built for the rule under test; `GOOD` passes every filter. Checked once by hand: datatrove
0.10.1 drops every "drop" document of the Gopher, C4 and FineWeb rules below with that same rule as
its first reason. Agreement on a corpus is measured by bench/filters.py (bench/results/filters.md).
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

from mix_assets.stages.filters.cascade import FilterConfig, apply_filters
from mix_assets.stages.filters.kernels import tokens
from mix_assets.stages.filters.rules.c4 import C4Filter
from mix_assets.stages.filters.rules.fineweb import FineWebFilter
from mix_assets.stages.filters.rules.gopher_quality import GopherQualityFilter
from mix_assets.stages.filters.rules.gopher_repetition import GopherRepetitionFilter, _greedy_dup_chars
from mix_assets.stages.filters.rules.sanity import SanityFilter

GOOD = "\n".join([
    "The river runs past the old mill and turns toward the quiet town.",
    "Farmers bring their grain to market on the first day of each week.",
    "A small bridge of grey stone crosses the water near the church.",
    "Children play with kites on the hill that overlooks the valley.",
    "In winter the roads are covered with snow and travel becomes slow.",
    "Most families keep a garden behind the house with beans and potatoes.",
    "The baker opens his shop before dawn to have fresh bread ready.",
    "Visitors often remark that the place seems untouched by modern life.",
])
SYL = ["ka", "lo", "mi", "ne", "su", "ra", "to", "vi", "de", "po", "gu", "fe"]
UNIQUE = ["".join(p) for p in itertools.product(SYL, repeat=3)]  # 1,728 distinct 6-letter words


def words(n: int, start: int = 0) -> str:
    return " ".join(UNIQUE[start:start + n])


def failed(texts, rule: str, **cfg) -> list[bool]:
    """failed[rule] per text, with the rule's filter alone (its config overridden by cfg)."""
    name = rule.split(":")[0]
    base = FilterConfig.only(name)
    filt = getattr(base, name).__class__(**cfg)
    r = apply_filters(texts, base.replace(**{name: filt}))
    return [bool(x) for x in r.failed[rule]]


def drops_first_keeps_second(rule: str, drop: str, keep: str, **cfg) -> None:
    assert failed([drop, keep], rule, **cfg) == [True, False], rule


def test_good_document_passes_everything():
    r = apply_filters([GOOD])
    assert r.reason == [None] and r.keep.tolist() == [True]
    assert r.texts.to_pylist() == [GOOD]


# -- sanity ----------------------------------------------------------------------------------------------


def test_sanity_rules():
    drops_first_keeps_second("sanity:empty", " \n\t ", "a")
    drops_first_keeps_second("sanity:binary", "abc\x00def", "abcdef")
    drops_first_keeps_second("sanity:control_chars", "x" * 300 + "\x01" * 4, "x" * 300 + "\x01" * 3)  # > max(2, 3.04)
    drops_first_keeps_second("sanity:control_chars", GOOD + "\ufffd" * 6, GOOD + "\x0c\x0c")
    drops_first_keeps_second("sanity:too_long", "x" * 101, "x" * 100, max_chars=100)


# -- Gopher quality ----------------------------------------------------------------------------------------


def test_gopher_quality_word_count():
    drops_first_keeps_second("gopher_quality:min_doc_words", words(49) + " , . !", words(50))
    drops_first_keeps_second("gopher_quality:max_doc_words", words(61), words(60), max_doc_words=60)


def test_gopher_quality_mean_word_length():
    short = " ".join(["ab"] * 30 + ["abcd"] * 29)  # mean 2.98
    ok = " ".join(["ab"] * 30 + ["abcd"] * 30)  # mean 3.0, not below
    drops_first_keeps_second("gopher_quality:min_avg_word_length", short, ok)
    long_ = " ".join(["abcdefghijk"] * 60)  # 11
    drops_first_keeps_second("gopher_quality:max_avg_word_length", long_, words(60))


def test_gopher_quality_symbol_ratios():
    base = words(100)  # 100 tokens; "#" and "..." become tokens of their own
    drops_first_keeps_second("gopher_quality:hash_ratio", base + " #" * 12, base + " #" * 11)  # 12/112, 11/111
    drops_first_keeps_second("gopher_quality:ellipsis_ratio", base + " …" * 12, base + " ..." * 11)


def test_gopher_quality_line_shares():
    lines = [words(6, 6 * i) for i in range(10)]
    bullets = "\n".join("- " + ln for ln in lines)
    nine = "\n".join(("• " if i < 9 else "") + ln for i, ln in enumerate(lines))  # 0.9, not above
    drops_first_keeps_second("gopher_quality:bullet_lines", bullets, nine)
    four = "\n".join(ln + ("..." if i < 4 else ".") for i, ln in enumerate(lines))
    three = "\n".join(ln + ("…" if i < 3 else ".") for i, ln in enumerate(lines))
    drops_first_keeps_second("gopher_quality:ellipsis_lines", four, three)


def test_gopher_quality_alpha_and_stop_words():
    # tokens with a letter / all tokens: punctuation and numbers count against (spaCy-style tokens)
    drops_first_keeps_second("gopher_quality:alpha_words", words(79) + " 1" * 21, words(80) + " 1" * 20)
    assert tokens(__import__("polars").Series(["Don't stop, Mr. Smith."])).to_list() == [
        ["Do", "n't", "stop", ",", "Mr.", "Smith", "."]]
    drops_first_keeps_second("gopher_quality:stop_words", words(60) + " the the", words(60) + " the and")
    drops_first_keeps_second("gopher_quality:stop_words", words(60) + " The And", words(60) + " of with")


# -- Gopher repetition -----------------------------------------------------------------------------------


def test_gopher_repetition_paragraphs_and_lines():
    paras = [words(8, 8 * i) + "." for i in range(10)]
    drops_first_keeps_second("gopher_repetition:dup_para_frac",
                             "\n\n".join(paras[:6] + [paras[0]] * 4),  # 4/10 repeats
                             "\n\n".join(paras[:7] + [paras[0]] * 3))  # 3/10, not above
    big, small = "x" * 300, words(3)
    drops_first_keeps_second("gopher_repetition:dup_para_char_frac",
                             "\n\n".join([big, big] + paras[:2]), "\n\n".join([big, big + "y"] + paras[:2]))
    drops_first_keeps_second("gopher_repetition:dup_line_frac",
                             "\n".join(paras[:6] + [small] * 5), "\n".join(paras[:7] + [small] * 4))
    drops_first_keeps_second("gopher_repetition:dup_line_char_frac",
                             "\n".join([big, big] + paras[:3]), "\n".join([big, big + "z"] + paras[:3]))


def test_gopher_repetition_top_ngram():
    u = words(60)  # 419 characters
    drops_first_keeps_second("gopher_repetition:top_2_gram", u + " x y" * 40, u + " x y" * 5)


def test_gopher_repetition_duplicate_ngrams_greedy():
    phrase = " " + words(5, 1000)  # 5 words of 6 letters: 30 characters a repeat
    assert _greedy_dup_chars((words(160) + phrase * 8).split(), 5) == 210
    # 210 of 1,399 characters (0.150) vs of 1,469 (0.143); the top 2-4-gram rules pass both
    drops_first_keeps_second("gopher_repetition:duplicated_5_n_grams", words(160) + phrase * 8, words(170) + phrase * 8)
    # the scan jumps past a repeat: "a a a a a a a" repeats the 5-gram once, not three times
    assert _greedy_dup_chars(["a"] * 7, 5) == 5
    assert _greedy_dup_chars(["ab", "c", "d", "e", "f", "a", "bc", "d", "e", "f"], 5) == 6  # "".join equal


def test_gopher_repetition_empty():
    assert failed([""], "gopher_repetition:empty") == [True]


# -- C4 ----------------------------------------------------------------------------------------------------


def test_c4_document_rules_and_their_order():
    drops_first_keeps_second("c4:lorem_ipsum", GOOD + "\nLorem ipsum dolor sit amet.",
                             GOOD + "\nLorem ipsum dolor sit amet")  # no end mark: the line goes first
    drops_first_keeps_second("c4:curly_bracket", GOOD + "\nThe set is {1, 2, 3}.", GOOD + "\nThe set is {1, 2, 3}")
    # a line mentioning JavaScript is dropped before the brace check
    drops_first_keeps_second("c4:curly_bracket", GOOD + "\nvar x = {a: 1};.", GOOD + "\nIn javascript x = {a: 1}.")
    lines = GOOD.split("\n")
    drops_first_keeps_second("c4:too_few_sentences", "\n".join(lines[:4]), "\n".join(lines[:5]))
    drops_first_keeps_second("c4:too_few_sentences", "\n".join(lines[:2]),
                             "\n".join(lines[:2]) + "\nOne more. And more. Yes, again.")  # 2 + 3 sentences


def test_c4_line_modifier():
    extra = ["Menu", "Please enable JavaScript to see the comments.", "Read our Privacy Policy for details.",
             "Two words.", "A word " + "x" * 1001 + " here.", "Cited here we are [12].", "Cited at the end. [3]"]
    r = apply_filters([GOOD + "\n" + "\n".join(extra)], FilterConfig.only("c4"))
    assert r.keep.tolist() == [True]
    assert r.texts.to_pylist() == [GOOD + "\nCited here we are ."]  # "[3]" leaves "end. " without an end mark
    same = apply_filters([GOOD + "\nMenu"], FilterConfig.only("c4").replace(c4=C4Filter(mode="filter")))
    assert same.texts.to_pylist() == [GOOD + "\nMenu"] and same.keep.tolist() == [True]
    kept = apply_filters([GOOD + "\n" + "w" * 1000 + " is long."], FilterConfig.only("c4")).texts.to_pylist()
    assert kept == [GOOD + "\n" + "w" * 1000 + " is long."]


# -- FineWeb -----------------------------------------------------------------------------------------------


def test_fineweb_rules():
    lines = [words(6, 6 * i) for i in range(10)]
    one = "\n".join(ln + ("." if i < 1 else "") for i, ln in enumerate(lines))  # 0.1 < 0.12
    two = "\n".join(ln + ("." if i < 2 else "") for i, ln in enumerate(lines))
    drops_first_keeps_second("fineweb:line_punct_ratio", one, two)
    short = [w + "." for w in UNIQUE[:7]] + [ln + "." for ln in lines[:3]]  # 7/10 lines <= 30 chars
    ok = [w + "." for w in UNIQUE[:6]] + [ln + "." for ln in lines[:4]]  # 0.6
    drops_first_keeps_second("fineweb:short_line_ratio", "\n".join(short), "\n".join(ok))
    drops_first_keeps_second("fineweb:char_dup_ratio", GOOD + "\n" + GOOD.split("\n")[0], GOOD)
    long_ = [w * 3 for w in UNIQUE]  # 18 letters: no line is short
    drops_first_keeps_second("fineweb:list_ratio", "\n".join(f"{a} {b}." for a, b in zip(long_[::2], long_[1::2][:40])),
                             "\n".join(f"{a} {b} {c}." for a, b, c in zip(long_[::3], long_[1::3], long_[2::3][:40])))
    drops_first_keeps_second("fineweb:empty", "\n \n\n", "a.")


# -- the cascade -------------------------------------------------------------------------------------------


def test_reason_is_the_first_failing_rule_and_stats_count_both_ways():
    # (20 distinct words would fail top_4_gram first: a count of 1 counts, 27 of 139 characters > 0.16)
    texts = ["", GOOD, words(30), GOOD + "\n" + GOOD.split("\n")[0]]
    r = apply_filters(texts)
    assert r.reason[0] == "sanity:empty"
    assert r.reason[1] is None
    assert r.reason[2] == "gopher_quality:min_doc_words"  # also fails C4 and FineWeb, later in the order
    assert r.reason[3] == "fineweb:char_dup_ratio"
    assert r.keep.tolist() == [False, True, False, False]
    assert r.stats["gopher_quality:min_doc_words"]["first_failure_documents"] == 1
    assert r.stats["gopher_quality:min_doc_words"]["failed_documents"] >= 2  # "" fails it too
    assert r.filter_reason["c4"][2] == "c4:too_few_sentences"


def test_fineweb_sees_the_c4_rewrite():
    nav = "\n".join(["Home", "About", "Contact", "Shop", "Menu", "Login", "Search", "News", "Help", "Jobs",
                     "Blog", "Press", "Cart", "Sale", "Sign up", "FAQ", "Terms"])
    doc = nav + "\n" + GOOD  # 17 of 25 lines short: FineWeb drops it as it stands
    alone = apply_filters([doc], FilterConfig.only("fineweb"))
    assert alone.reason == ["fineweb:short_line_ratio"]
    both = apply_filters([doc], FilterConfig.only("c4", "fineweb"))
    assert both.reason == [None] and both.texts.to_pylist() == [GOOD]


def test_inputs_arrow_list_and_nulls():
    a = apply_filters(pa.array([GOOD, None, "x"], pa.large_string()))
    b = apply_filters([GOOD, "", "x"])
    assert a.reason == b.reason and a.reason[1] == "sanity:empty"
    assert apply_filters(pa.chunked_array([[GOOD], ["x"]])).reason[0] is None


def test_switches_and_config_errors():
    r = apply_filters([words(10)], FilterConfig.only())
    assert r.keep.tolist() == [True] and r.failed == {}
    r = apply_filters([words(10)], FilterConfig(gopher_quality=GopherQualityFilter(min_doc_words=None)))
    assert "gopher_quality:min_doc_words" not in [x for x in r.reason if x]
    with pytest.raises(ValueError, match="unknown filter"):
        FilterConfig.only("gopher")
    with pytest.raises(ValueError, match="mode"):
        C4Filter(mode="rewrite")
    assert FineWebFilter().char_duplicates_ratio == 0.01 and GopherRepetitionFilter().top_n_grams[0] == (2, 0.2)
    assert SanityFilter().max_chars == 1_000_000
