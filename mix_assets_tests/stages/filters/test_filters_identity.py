"""stages/filters/cascade.py's faster cascade decides exactly as its first version (oracles/filters_reference.py):
every rule column, reason, per-filter reason, stat and rewritten text, on adversarial batches (unicode,
empty and whitespace-only texts, very long lines, repeated paragraphs, lines that open with end marks,
one-sentence lines, citations, every line boundary str.splitlines knows) and generated prose, for C4
in both modes, several word / sentence minimums and with the Gopher filters (the shared tokens) off."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mix_assets.stages.filters import cascade as F
from mix_assets.stages.filters.rules.c4 import C4Filter
from mix_assets.stages.filters.rules.fineweb import FineWebFilter
from mix_assets.stages.filters.rules.gopher_repetition import GopherRepetitionFilter
from mix_assets_tests.oracles import filters_reference as ref

SENT = [
    "The river runs past the old mill and turns toward the quiet town.",
    "Is it true? Yes! He said so.", "Mr. Smith met Dr. Jones at 3 p.m. on Jan. 5th.",
    "...and then nothing happened at all.", ". Opens with a stop and goes on.", "Ends with dots...",
    "“Quoted speech,” she said. “Another one.”", "A citation follows here.[1] And more [edit].",
    "Ein Satz auf Deutsch. Noch einer!", "这是一个句子。这是另一个。", "Numbers 1.5 and 2.0. Then 3!",
    "co-op don't can't won't it's they're.", "?!", ". . .", "word", "two words", "three short words",
    "lorem ipsum dolor sit amet.", "Enable javascript to view.", "We use cookies. Privacy policy.",
    "function() { return 1; }.", "# heading #", "• bullet point line", "- dash line here.",
    "URL https://example.com/a.b?c=d. Next sentence.", "tab\tseparated\twords here.", "\u00a0nbsp  inside. Yes.",
    "Emoji 😀 end. Next 🎉!", "Arabic ؟ question؟ and more.", "Devanagari । दो।", "x" * 1200 + ".",
    "Scores were high. 10 20 30.", "Prices rose. $5 + €6 = £11.", "no end mark on this long line of many words",
]
SEPS = ["\n", "\n\n", "\r\n", "\u2028", "\x0b", "\x0c", "\x1c", "\x85", " ", "\n \n", "\n\n\n"]


def adversarial(seed: int, count: int = 150) -> list:
    rng = random.Random(seed)
    docs = ["", " ", "\n", "\n\n\n", "\t \u3000 \n", "\x00bin", ".", "a\n" * 40, None, "\r\n".join(SENT),
            "\n".join(SENT * 3), ("Same paragraph here once more.\n\n" * 12).strip(), " ".join(["word"] * 2000),
            "\n".join(["A line.", "Two. Lines?", "x!"] * 2)]
    for _ in range(count):
        lines = [rng.choice(SENT) if rng.random() < 0.8 else " ".join(rng.choices(SENT, k=rng.randint(2, 6)))
                 for _ in range(rng.randint(0, 14))]
        if lines and rng.random() < 0.3:
            lines += lines[:rng.randint(1, len(lines))]  # repeated lines / paragraphs
        docs.append(rng.choice(SEPS).join(lines) if rng.random() < 0.6
                    else "".join(x + rng.choice(SEPS) for x in lines))
    return docs


def assert_same(texts, config: F.FilterConfig) -> None:
    new, old = F.apply_filters(texts, config), ref.apply_filters(texts, config)
    assert list(new.failed) == list(old.failed)
    for rule in old.failed:
        assert np.array_equal(new.failed[rule], old.failed[rule]), rule
    assert new.reason == old.reason and new.filter_reason == old.filter_reason and new.stats == old.stats
    assert np.array_equal(new.keep, old.keep) and new.texts.equals(old.texts)
    assert new.python_docs == old.python_docs


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", ["filter", "modify"])
@pytest.mark.parametrize("newlines", [0.3, 0.1])  # 0.1: the newlines-per-word rule fires on rewritten texts too
def test_cascade_equals_the_first_version(seed, mode, newlines):
    assert_same(adversarial(seed), F.FilterConfig(c4=C4Filter(mode=mode), fineweb=FineWebFilter(new_line_ratio=newlines)))


@pytest.mark.parametrize("words,sentences", [(None, 5), (0, 1), (1, 2), (2, 3), (5, 8), (3, None)])
def test_c4_minimums_equal_the_first_version(words, sentences):
    c4 = C4Filter(min_words_per_line=words, min_num_sentences=sentences, filter_no_terminal_punct=words != 2)
    assert_same(adversarial(7), F.FilterConfig(c4=c4))


@pytest.mark.parametrize("mode", ["filter", "modify"])
def test_fineweb_without_the_gopher_tokens_equals_the_first_version(mode):
    assert_same(adversarial(3), F.FilterConfig.only("c4", "fineweb").replace(c4=C4Filter(mode=mode)))


def test_generated_prose_equals_the_first_version():
    from mix_assets_tests.stages.filters.test_filters_repetition import varied_docs

    assert_same(varied_docs(11, count=200), F.FilterConfig(c4=C4Filter(mode="modify")))


@pytest.mark.parametrize("top", [((2, 0.2), (3, 0.18), (4, 0.16)), ((2, 0.05), (3, 0.03), (4, 0.02)),
                                 ((4, 0.05), (2, 0.1), (3, 0.02)), ((3, 0.01),), ((2, 0.3), (5, 0.01), (4, 0.04))])
def test_top_ngram_sizes_in_any_order_equal_the_first_version(top):
    """The count bound of a smaller size clears documents of the larger sizes after it (never before)."""
    from mix_assets_tests.stages.filters.test_filters_repetition import varied_docs

    rep = GopherRepetitionFilter(top_n_grams=top, dup_n_grams=())
    assert_same(varied_docs(5, count=150) + adversarial(4, 60),
                F.FilterConfig.only("gopher_repetition").replace(gopher_repetition=rep))
