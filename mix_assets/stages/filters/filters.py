"""Heuristic document quality filters, computed in bulk over a batch of texts (polars), no Dagster.

The rules and their defaults are the published ones, as datatrove 0.10.1 implements them (read in
`datatrove/pipeline/filters/`, class and file named on each config below):
  - Gopher quality and repetition: Rae et al. 2021, "Scaling Language Models: Methods, Analysis &
    Insights from Training Gopher", arXiv 2112.11446, App. A.1.1 and Table A1 (the thresholds that
    `gopher_repetition_filter.py` quotes in its docstring);
  - C4: Raffel et al. 2020, arXiv 1910.10683 section 2.2, as `C4QualityFilter` has it (which keeps
    lines of >= 3 words and documents of >= 5 sentences, where the paper says 5 words / 3 sentences);
  - FineWeb: Penedo et al. 2024, arXiv 2406.17557 section 3.6, as `FineWebQualityFilter` has it
    (duplicated-line character share 0.01, and the 0.3 newlines-per-word rule the paper does not list);
  - sanity: this project's own raw-text rules (stages/sources/sources.py `not_text`, `min_doc_chars`, `max_doc_chars`).

Words: datatrove splits English with spaCy's blank "en" tokenizer, where punctuation becomes tokens,
and the Gopher "alphabetic words" and FineWeb "newlines per word" rules count those tokens. `TOKEN_RE`
is one regular expression that reproduces that split on ordinary prose (bench/filters.py measures the
decisions it gives against datatrove's). Everything is polars / numpy over the batch. Gopher
repetition's n-grams are rolling 64-bit keys over one flat token array of the batch, grouped by plain
`np.sort`s (no group-bys, no stable argsorts). Its duplicate 5- to 10-gram rule is a greedy
left-to-right scan that skips past each repeat, which has no bulk form: bulk upper bounds (the
characters of the tokens covered by repeated n-grams) clear most documents, and the scan runs per
document, on hashed n-grams, only for the rest (`FilterResult.python_docs`, timed in
`seconds["gopher_repetition:python_scan"]`).

`apply_filters(texts, config)` runs sanity -> Gopher repetition -> Gopher quality -> C4 -> FineWeb
(the order of datatrove's examples/fineweb.py@05194d39, which runs C4 with filter_no_terminal_punct
off; the default here is the class default, on). Every filter is evaluated on every document; the
document's reason is the first failing rule (`<filter>:<rule>`, an open set of strings), and the C4
line modifier hands its rewritten text to FineWeb, as in the pipeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Optional, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

# The raw stage's control-character rule (stages/sources/sources.py imports these: config.py imports this module)
CONTROL_SHARE_MAX = 0.01
CONTROL_ALLOWED = 2

__all__ = [
    "SanityFilter", "GopherQualityFilter", "GopherRepetitionFilter", "C4Filter", "FineWebFilter",
    "FilterConfig", "FilterResult", "apply_filters", "FILTER_ORDER", "TOKEN_RE",
]

# -- character sets (datatrove utils/text.py: PUNCTUATION, TERMINAL_PUNCTUATION, PUNCTUATION_SET) -----
_DT_PUNCTUATION = '!/\u2014\u201d:\uff05\uff11\u3008&(\u3001\u2501\\\u3010#%\u300c\u300d\uff0c\u3011\uff1b+^]~\u201c\u300a\u201e\';\u2019{|\u2236\xb4[=-`*\uff0e\uff08\u2013\uff1f\uff01\uff1a$\uff5e\xab\u3009,><\u300b)?\uff09\u3002\u2026@_."}\u25ba\xbb'
TERMINAL_PUNCTUATION = (
    '!.?\u0589\u061d\u061e\u061f\u06d4\u0700\u0701\u0702\u07f9'
    '\u0837\u0839\u083d\u083e\u0964\u0965\u104a\u104b\u1362\u1367\u1368\u166e'
    '\u1735\u1736\u17d4\u17d5\u17d6\u17d9\u17da\u1803\u1809\u1944\u1945\u1aa8'
    '\u1aa9\u1aaa\u1aab\u1b5a\u1b5b\u1b5e\u1b5f\u1b7d\u1b7e\u1c3b\u1c3c\u1c7e'
    '\u1c7f\u203c\u203d\u2047\u2048\u2049\u2e2e\u2e3c\u2e53\u2e54\u3002\ua4ff'
    '\ua60e\ua60f\ua6f3\ua6f7\ua876\ua877\ua8ce\ua8cf\ua92f\ua9c8\ua9c9\uaa5d'
    '\uaa5e\uaa5f\uaaf0\uaaf1\uabeb\ufe52\ufe56\ufe57\uff01\uff0e\uff1f\uff61'
    '\U00010a56\U00010a57\U00010f55\U00010f56\U00010f57\U00010f58\U00010f59\U00010f86\U00010f87\U00010f88\U00010f89\U00011047'
    '\U00011048\U000110be\U000110bf\U000110c0\U000110c1\U00011141\U00011142\U00011143\U000111c5\U000111c6\U000111cd\U000111de'
    '\U000111df\U00011238\U00011239\U0001123b\U0001123c\U000112a9\U0001144b\U0001144c\U000115c2\U000115c3\U000115c9\U000115ca'
    '\U000115cb\U000115cc\U000115cd\U000115ce\U000115cf\U000115d0\U000115d1\U000115d2\U000115d3\U000115d4\U000115d5\U000115d6'
    '\U000115d7\U00011641\U00011642\U0001173c\U0001173d\U0001173e\U00011944\U00011946\U00011a42\U00011a43\U00011a9b\U00011a9c'
    '\U00011c41\U00011c42\U00011ef7\U00011ef8\U00011f43\U00011f44\U00016a6e\U00016a6f\U00016af5\U00016b37\U00016b38\U00016b44'
    '\U00016e98\U0001bc9f\U0001da88'
)

TERMINAL_PUNCTUATION = "".join(TERMINAL_PUNCTUATION)
# PUNCTUATION also holds the C0 controls other than \t \n (\r included) and DEL..U+009F
PUNCTUATION_SET = frozenset(_DT_PUNCTUATION + "".join(
    chr(x) for a, b in ((0, 9), (11, 13), (13, 32), (127, 160)) for x in range(a, b)) + TERMINAL_PUNCTUATION)


def _cls(chars) -> str:
    """A regex character class body matching exactly these characters (each one \\x{..}-escaped)."""
    return "".join(f"\\x{{{ord(c):X}}}" for c in sorted(set(chars)))


_NON_SYMBOL = f"[^{_cls(PUNCTUATION_SET)}]"  # a word with any character outside PUNCTUATION_SET
_TERMINAL_END = f"[{_cls(TERMINAL_PUNCTUATION)}]$"
_SENT_END = f"^[{_cls(TERMINAL_PUNCTUATION)}]$"

# spaCy English tokenizer exceptions that keep their final "." (spacy/lang/en/tokenizer_exceptions.py)
_ABBREV = (
    "Adm Ak Ala Apr Ariz Ark Aug Bros Calif Co Colo Conn Corp Dec Del Dr Feb Fla Ga Gen Gov Ia Id Ill Inc "
    "Ind Jan Jr Jul Jun Kan Kans Ky La Ltd Mar Mass Md Messrs Mich Minn Miss Mo Mont Mr Mrs Ms Mt Neb Nebr "
    "Nev Nov Oct Okla Ore Pa Prof Rep Rev Sen Sep Sept St Tenn Va Wash Wis co vs"
).split()
# One pass over the text (after `_presplit`) gives spaCy-like tokens: URLs; contraction suffixes and
# 'em 'cause ("'tis" is "'" + "tis"); dotted acronyms, abbreviations, single letters with a dot ("p.", "J."); "..."
# is one token; "1.B." keeps its dot (spaCy splits a final "." only after a lower-case letter, a digit
# or two capitals); letters and digits joined by . : + & ' , by / and , before a digit, and by (,)-- where
# _presplit left them ("body,--for") stay one word, with hyphens at either end ("-word", "yet--");
# "@,@" and runs of @ - / ^ ~ | \ are one token; any other non-space character is a token of its own
# (so "_", brackets and quotes split off, as spaCy's prefix/suffix rules do).
TOKEN_RE = (
    r"https?://\S+"
    r"|['’](?:[sSmMdD]|re|ve|ll)(?-u:\b)|n['’]t(?-u:\b)"
    r"|(?:\p{L}\.){2,}"
    r"|(?-u:\b)(?:" + "|".join(_ABBREV) + r"|[a-z]|\p{Lu})\."
    r"|['’](?:em|cause)(?-u:\b)"
    r"|\.\.+|…"
    r"|-*(?:[\p{L}\p{M}\p{N}]+\.)+\p{Lu}\."
    r"|-*[\p{L}\p{M}\p{N}]+(?:[.:+&'’][\p{L}\p{M}\p{N}]+|[/,]\p{N}[\p{L}\p{M}\p{N}]*|,?-+[\p{L}\p{M}\p{N}]+)*(?:,?-+)?"
    r"|@[,.]@|[@\-/^~|\\]+"
    r"|\S"
)
# spaCy splits 's after any word, and n't 'm 're 've 'll 'd only in its listed exceptions (the common
# ones here); "banish'd", "upon't" stay whole. A hyphen between letters (or between digits) is a token.
# Word boundaries are ASCII ones, (?-u:\b): a Unicode \b keeps the regex off its fast engine (5-10x).
_PRESPLIT = (
    (r"(\p{L})(['’][sS])(?-u:\b)", "$1 $2"),
    (r"(?-u:\b)((?i:do|does|did|is|are|was|were|have|has|had|could|would|should|must|might|need|ca|wo|ai|sha))"
     r"(n['’]t)(?-u:\b)", "$1 $2"),
    (r"(?-u:\b)((?i:i|you|he|she|it|we|they|who|what|that|there|where|how|here|could|would|should|might|must))"
     r"(['’](?:[mM]|re|ve|ll|d))(?-u:\b)", "$1 $2"),
    (r"([\p{L}\p{N}])(-+)(\p{L})", "$1 $2 $3"),
    (r"([\p{L}\p{N}])(-+)(\p{L})", "$1 $2 $3"),  # again: matches above do not overlap ("a-b-c")
    (r"(\p{N})-(\p{N})", "$1 - $2"),
    (r"(?-u:\b)([Cc]an)(not)(?-u:\b)", "$1 $2"),
)


def _presplit(col: pl.Expr) -> pl.Expr:
    """Spaces where spaCy splits inside a word ("don't" -> "do n't", "co-op" -> "co - op")."""
    for pat, rep in _PRESPLIT:
        col = col.str.replace_all(pat, rep)
    return col


# str.splitlines() boundaries (it also drops one trailing empty line)
_LINE_BOUNDARY = "\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"
_SEP = "\ue000"  # private-use separator for regex splits (polars str.split is literal)
_CONTROL = "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffd]"  # as stages/sources/sources.py _CONTROL


# -- configuration -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SanityFilter:
    """Empty, binary-looking and overlong texts (stages/sources/sources.py rules, as the raw stage applies them)."""

    enabled: bool = True
    min_chars: int = 1  # after strip(); shorter -> sanity:empty
    max_chars: int = 1_000_000  # longer -> sanity:too_long
    max_control_share: float = CONTROL_SHARE_MAX  # C0/C1 controls and U+FFFD -> sanity:control_chars
    control_allowed: int = CONTROL_ALLOWED  # this many are always allowed (stray form feeds)


@dataclass(frozen=True)
class GopherQualityFilter:
    """Gopher quality rules (arXiv 2112.11446 A.1.1): datatrove GopherQualityFilter,
    pipeline/filters/gopher_quality_filter.py, same defaults. None switches a rule off."""

    enabled: bool = True
    min_doc_words: Optional[int] = 50  # words with a non-punctuation character
    max_doc_words: Optional[int] = 100_000
    min_avg_word_length: Optional[float] = 3
    max_avg_word_length: Optional[float] = 10
    max_symbol_word_ratio: Optional[float] = 0.1  # count("#") and count("..."/"…") per token, separately
    max_bullet_lines_ratio: Optional[float] = 0.9  # lines starting with • or -
    max_ellipsis_lines_ratio: Optional[float] = 0.3  # lines ending with ... or …
    min_alpha_words_ratio: Optional[float] = 0.8  # datatrove's `max_non_alpha_words_ratio`
    min_stop_words: Optional[int] = 2  # distinct stop words present (case-sensitive)
    stop_words: tuple = ("the", "be", "to", "of", "and", "that", "have", "with")


@dataclass(frozen=True)
class GopherRepetitionFilter:
    """Gopher repetition rules (arXiv 2112.11446 Table A1): datatrove GopherRepetitionFilter,
    pipeline/filters/gopher_repetition_filter.py, same defaults. None / () switches a rule off."""

    enabled: bool = True
    dup_para_frac: Optional[float] = 0.3
    dup_para_char_frac: Optional[float] = 0.2
    dup_line_frac: Optional[float] = 0.3
    dup_line_char_frac: Optional[float] = 0.2
    top_n_grams: tuple = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))


@dataclass(frozen=True)
class C4Filter:
    """C4 line rules (arXiv 1910.10683 2.2): datatrove C4QualityFilter, pipeline/filters/c4_filters.py,
    same defaults (split_paragraph=True). mode "modify": a kept document's text becomes its kept lines
    (as datatrove does); mode "filter": the same keep/drop decision, the text is left as it was."""

    enabled: bool = True
    mode: str = "modify"
    remove_citations: bool = True  # [1], [edit], [citation needed]
    filter_no_terminal_punct: bool = True  # FineWeb ran C4 with this off
    min_num_sentences: Optional[int] = 5  # of the kept lines; fewer -> c4:too_few_sentences
    min_words_per_line: Optional[int] = 3
    max_word_length: Optional[int] = 1000  # a line with a longer word is dropped
    filter_lorem_ipsum: bool = True  # drops the document
    filter_javascript: bool = True  # drops the line
    filter_curly_bracket: bool = True  # drops the document
    filter_policy: bool = True  # drops the line
    policy_substrings: tuple = ("terms of use", "privacy policy", "cookie policy", "uses cookies",
                                "use of cookies", "use cookies")

    def __post_init__(self):
        if self.mode not in ("modify", "filter"):
            raise ValueError(f"C4Filter.mode must be 'modify' or 'filter', got {self.mode!r}")


@dataclass(frozen=True)
class FineWebFilter:
    """FineWeb rules (arXiv 2406.17557 3.6): datatrove FineWebQualityFilter,
    pipeline/filters/fineweb_quality_filter.py, same defaults. None switches a rule off."""

    enabled: bool = True
    line_punct_thr: Optional[float] = 0.12  # share of lines ending in terminal punctuation, below -> drop
    line_punct_exclude_zero: bool = False
    short_line_thr: Optional[float] = 0.67
    short_line_length: int = 30
    char_duplicates_ratio: Optional[float] = 0.01  # the paper's text says 0.1
    new_line_ratio: Optional[float] = 0.3


@dataclass(frozen=True)
class FilterConfig:
    sanity: SanityFilter = field(default_factory=SanityFilter)
    gopher_repetition: GopherRepetitionFilter = field(default_factory=GopherRepetitionFilter)
    gopher_quality: GopherQualityFilter = field(default_factory=GopherQualityFilter)
    c4: C4Filter = field(default_factory=C4Filter)
    fineweb: FineWebFilter = field(default_factory=FineWebFilter)

    @classmethod
    def only(cls, *names: str) -> "FilterConfig":
        """Defaults with every filter but `names` switched off."""
        unknown = set(names) - set(FILTER_ORDER)
        if unknown:
            raise ValueError(f"unknown filter(s) {sorted(unknown)}; known: {list(FILTER_ORDER)}")
        return cls(**{f.name: f.default_factory(enabled=f.name in names) for f in fields(cls)})


FILTER_ORDER = ("sanity", "gopher_repetition", "gopher_quality", "c4", "fineweb")


@dataclass
class FilterResult:
    keep: np.ndarray  # bool per document
    reason: list  # first failing rule "<filter>:<rule>", None where kept
    texts: pa.Array  # the texts after the line modifiers (C4 in mode "modify"), as input elsewhere
    failed: dict  # "<filter>:<rule>" -> bool per document, every rule evaluated on its own
    filter_reason: dict  # filter name -> first failing rule of that filter per document (None = passes)
    stats: dict  # "<filter>:<rule>" -> {"failed_documents", "first_failure_documents"}
    seconds: dict  # filter name -> wall seconds (and "gopher_repetition:python_scan", inside it)
    python_docs: int = 0  # documents that needed the per-document duplicate n-gram scan


# -- helpers -------------------------------------------------------------------------------------------


def _splitlines(col: pl.Expr) -> pl.Expr:
    return col.str.replace_all(_LINE_BOUNDARY, "\n").str.replace(r"\n$", "").str.split("\n")


def _dups(lst: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(repeated elements, their characters): every occurrence after an element's first."""
    rep = lst.list.eval(pl.element().is_first_distinct().not_())
    chars = lst.list.eval(pl.element().filter(pl.element().is_first_distinct().not_()).str.len_chars())
    return rep.list.sum(), chars.list.sum()


def _ratio(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """a / b, null where b is 0 (a rule on a ratio never fires on an empty denominator)."""
    return pl.when(b > 0).then(a / b)


def _gt(x, thr):
    """x > thr as bool (null -> False); thr None -> never."""
    return pl.lit(False) if thr is None else (x > thr).fill_null(False)


def _lt(x, thr):
    return pl.lit(False) if thr is None else (x < thr).fill_null(False)


def _first_reason(df: pl.DataFrame, rules: Sequence[str]) -> pl.Series:
    expr = pl.lit(None, dtype=pl.String)
    for r in reversed(rules):
        expr = pl.when(pl.col(r)).then(pl.lit(r)).otherwise(expr)
    return df.select(expr.alias("r")).to_series()


def _as_series(texts) -> pl.Series:
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if isinstance(texts, pa.Array):
        s = pl.from_arrow(texts)
        return s.cast(pl.String)
    return pl.Series("text", list(texts), dtype=pl.String)


# -- the filters: each returns a frame of bool columns "<filter>:<rule>" in rule order -----------------


def _sanity(text: pl.Series, cfg: SanityFilter, values: bool = False) -> pl.DataFrame:
    t = pl.col("text")
    n = t.str.len_chars()
    ctrl = t.str.count_matches(_CONTROL)
    if values:  # the measured figures (control_chars: against its limit max(allowed, share * chars))
        return pl.DataFrame({"text": text}).select(
            t.str.strip_chars().str.len_chars().cast(pl.Float64).alias("sanity:empty"),
            pl.lit(None, pl.Float64).alias("sanity:binary"),
            ctrl.cast(pl.Float64).alias("sanity:control_chars"),
            pl.max_horizontal(pl.lit(cfg.control_allowed), cfg.max_control_share * n).cast(pl.Float64)
            .alias("sanity:control_chars:limit"),
            n.cast(pl.Float64).alias("sanity:too_long"))
    return pl.DataFrame({"text": text}).select(
        (t.str.strip_chars().str.len_chars() < cfg.min_chars).alias("sanity:empty"),
        t.str.contains("\x00", literal=True).alias("sanity:binary"),
        (ctrl > pl.max_horizontal(pl.lit(cfg.control_allowed), cfg.max_control_share * n)).alias("sanity:control_chars"),
        (n > cfg.max_chars).alias("sanity:too_long"),
    )


def _tokens(text: pl.Series) -> pl.Series:
    return pl.DataFrame({"text": text}).select(_presplit(pl.col("text")).str.extract_all(TOKEN_RE)).to_series()


def _gopher_quality(text: pl.Series, toks: pl.Series, cfg: GopherQualityFilter, values: bool = False) -> pl.DataFrame:
    t, w = pl.col("text"), pl.col("toks")
    lines = _splitlines(t)
    nonsym_len = w.list.eval(pl.element().filter(pl.element().str.contains(_NON_SYMBOL)).str.len_chars())
    n_words = w.list.len()
    stats = pl.DataFrame({"text": text, "toks": toks}).select(
        n_words=n_words,
        n_nonsym=nonsym_len.list.len(),
        avg_len=nonsym_len.list.mean(),
        hash_ratio=_ratio(t.str.count_matches("#", literal=True), n_words),
        ellipsis_ratio=_ratio(t.str.count_matches("...", literal=True) + t.str.count_matches("…", literal=True), n_words),
        bullet=lines.list.eval(pl.element().str.contains(r"^\s*[•\-]")).list.mean(),
        end_ellipsis=lines.list.eval(pl.element().str.contains(r"(?:\.\.\.|…)\s*$")).list.mean(),
        alpha=w.list.eval(pl.element().str.contains(r"\p{L}")).list.mean(),
        stop=w.list.eval(pl.element().filter(pl.element().is_in(list(cfg.stop_words))).unique()).list.len(),
    )
    c = pl.col
    if values:
        return stats.select(*(c(col).cast(pl.Float64).alias(rule) for rule, col in _QUALITY_STATS.items()))
    return stats.select(
        _lt(c("n_nonsym"), cfg.min_doc_words).alias("gopher_quality:min_doc_words"),
        _gt(c("n_nonsym"), cfg.max_doc_words).alias("gopher_quality:max_doc_words"),
        _lt(c("avg_len"), cfg.min_avg_word_length).alias("gopher_quality:min_avg_word_length"),
        _gt(c("avg_len"), cfg.max_avg_word_length).alias("gopher_quality:max_avg_word_length"),
        _gt(c("hash_ratio"), cfg.max_symbol_word_ratio).alias("gopher_quality:hash_ratio"),
        _gt(c("ellipsis_ratio"), cfg.max_symbol_word_ratio).alias("gopher_quality:ellipsis_ratio"),
        _gt(c("bullet"), cfg.max_bullet_lines_ratio).alias("gopher_quality:bullet_lines"),
        _gt(c("end_ellipsis"), cfg.max_ellipsis_lines_ratio).alias("gopher_quality:ellipsis_lines"),
        _lt(c("alpha"), cfg.min_alpha_words_ratio).alias("gopher_quality:alpha_words"),
        _lt(c("stop"), cfg.min_stop_words).alias("gopher_quality:stop_words"),
    )


# the statistic each Gopher quality rule compares with its threshold
_QUALITY_STATS = {
    "gopher_quality:min_doc_words": "n_nonsym", "gopher_quality:max_doc_words": "n_nonsym",
    "gopher_quality:min_avg_word_length": "avg_len", "gopher_quality:max_avg_word_length": "avg_len",
    "gopher_quality:hash_ratio": "hash_ratio", "gopher_quality:ellipsis_ratio": "ellipsis_ratio",
    "gopher_quality:bullet_lines": "bullet", "gopher_quality:ellipsis_lines": "end_ellipsis",
    "gopher_quality:alpha_words": "alpha", "gopher_quality:stop_words": "stop",
}

_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the rolling n-gram hash


class _NGrams:
    """Rolling 64-bit keys of every token n-gram of a batch (numpy, wrapping arithmetic), the document
    mixed in, so equal keys mean equal n-grams of the same document (bar a 2^-64 collision). Tokens are
    flat arrays grouped by document in order."""

    def __init__(self, doc: np.ndarray, h: np.ndarray, tlen: np.ndarray):
        self.doc, self.h, self.tlen = doc, h, tlen
        self.n, self.key, self.chars = 1, self._start(), tlen

    def _start(self) -> np.ndarray:
        with np.errstate(over="ignore"):
            return self.h ^ (self.doc * _MIX)  # the document mixed in: equal keys, same document

    def grow(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start rows, keys, characters of the n tokens) of the n-grams inside one document."""
        if n < self.n:  # restart (configured n-gram sizes out of order)
            self.n, self.key, self.chars = 1, self._start(), self.tlen
        with np.errstate(over="ignore"):
            while self.n < n:
                m = len(self.key) - 1
                self.key = self.key[:m] * _MIX + self.h[self.n:self.n + m]
                self.chars = self.chars[:m] + self.tlen[self.n:self.n + m]
                self.n += 1
        m = len(self.key)
        rows = np.flatnonzero(self.doc[:m] == self.doc[self.n - 1:self.n - 1 + m])
        return rows, self.key[rows], self.chars[rows]


def _fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser (a bijection): spreads a difference in the low bits to the high ones."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
        x = (x ^ (x >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
        return x ^ (x >> np.uint64(33))


def _groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, starts): the rows of `key` ordered so that equal keys are consecutive, in row order within
    a run, and the index in `rows` where each run starts. One plain sort of (the key's high bits, row),
    ~10x faster than a stable argsort; runs of equal high bits holding unequal keys (a few per million)
    are then ordered by (key, row)."""
    n = len(key)
    rb = np.uint64(max(1, n.bit_length()))
    s = np.sort((_fmix(key) >> rb << rb) | np.arange(n, dtype=np.uint64))
    rows, high = (s & ((np.uint64(1) << rb) - np.uint64(1))).astype(np.int64), s >> rb
    k = key[rows]
    new = k[1:] != k[:-1]
    clash = new & (high[1:] == high[:-1])
    if clash.any():
        run = np.cumsum(np.concatenate([[True], high[1:] != high[:-1]]))
        at = np.flatnonzero(np.isin(run, run[1:][clash]))
        rows[at] = rows[at][np.lexsort((rows[at], k[at]))]
        k = key[rows]
        new = k[1:] != k[:-1]
    return rows, np.flatnonzero(np.concatenate([[n > 0], new]))


def _later_repeats(key: np.ndarray) -> np.ndarray:
    """True where an equal key occurs earlier in the array (every occurrence of a key but its first)."""
    rows, starts = _groups(key)
    out = np.ones(len(key), dtype=bool)
    out[rows[starts]] = False
    return out


def _top_ngram_chars(key: np.ndarray, doc: np.ndarray, chars: np.ndarray, n: int, ndoc: int) -> np.ndarray:
    """Per document: len(" ".join(g)) * count of its most frequent n-gram g (ties: the first seen)."""
    rows, starts = _groups(key)
    cnt = np.diff(np.append(starts, len(key)))
    first = rows[starts]
    d = doc[first]
    cmax = np.zeros(ndoc, np.int64)
    np.maximum.at(cmax, d, cnt)
    best = np.full(ndoc, len(key), np.int64)
    top = cnt == cmax[d]
    np.minimum.at(best, d[top], first[top])
    has = best < len(key)
    out = np.zeros(ndoc, np.int64)
    out[has] = (chars[best[has]] + n - 1) * cmax[has]
    return out


def _per_doc_max(doc: np.ndarray, x: np.ndarray, ndoc: int) -> np.ndarray:
    """Max of x per document, 0 where none (doc sorted)."""
    out = np.zeros(ndoc, np.int64)
    if len(doc):
        at = np.flatnonzero(np.concatenate([[True], doc[1:] != doc[:-1]]))
        out[doc[at]] = np.maximum.reduceat(x, at)
    return out


def _top_ngram_fails(key: np.ndarray, doc: np.ndarray, chars: np.ndarray, n: int, limit: np.ndarray,
                     cap: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """(`_top_ngram_chars(...) > limit` per document, per document a bound on any n-gram's count). One plain
    sort of (document, key's high bits) gives each document's highest count; that count * the document's
    longest n-gram bounds the characters, and only documents over `limit` on the bound (~5 % here) need
    the first-seen tie-break. `cap`, a bound on the counts of a shorter n-gram size (an n-gram occurs at
    most as often as its prefix), clears documents before the sort."""
    ndoc = len(limit)
    out = np.zeros(ndoc, dtype=bool)
    longest = _per_doc_max(doc, chars, ndoc)
    cmax = np.zeros(ndoc, np.int64) if cap is None else cap.copy()
    if cap is not None:
        sub = ((longest + n - 1) * cap > limit)[doc]
        key, doc, chars = key[sub], doc[sub], chars[sub]
    if not len(key):
        return out, cmax
    shift = np.uint64(max(1, (ndoc - 1).bit_length()))
    s = np.sort((doc.astype(np.uint64) << (np.uint64(64) - shift)) | (key >> shift))
    starts = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1]]))
    got = _per_doc_max((s[starts] >> (np.uint64(64) - shift)).astype(np.int64),
                       np.diff(starts, append=len(s)), ndoc)  # a collision in the truncated key only raises it
    mine = np.unique(doc)
    cmax[mine] = got[mine] if cap is None else np.minimum(cap[mine], got[mine])
    need = (longest + n - 1) * cmax > limit
    if need.any():
        sub = need[doc]
        out[need] = (_top_ngram_chars(key[sub], doc[sub], chars[sub], n, ndoc) > limit)[need]
    return out, cmax


def _greedy_dup_chars(words: list, n: int) -> int:
    """datatrove find_all_duplicate: a repeat of an n-gram ("".join) adds its characters and skips n.
    (The reference for `_greedy_scan`, which runs the same loop on hashes of the joined n-grams.)"""
    seen, out, i, end = set(), 0, 0, len(words) - n + 1
    while i < end:
        g = "".join(words[i:i + n])
        if g in seen:
            out += len(g)
            i += n
        else:
            seen.add(g)
            i += 1
    return out


_BASE = np.uint64(0x100000001B3)  # odd base of the polynomial byte hash


def _join_hashes(flat: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per token: (polynomial hash of its UTF-8 bytes, base ** byte length), both mod 2**64, so that
    hash(a + b) = hash(a) * base ** len(b) + hash(b): n-gram keys of "".join semantics by rolling."""
    arr = flat.to_arrow().cast(pa.large_string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    off = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + len(arr) + 1]
    blen = np.diff(off)
    if len(arr) == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    data = np.frombuffer(arr.buffers()[2], np.uint8)[off[0]:off[-1]].astype(np.uint64)
    with np.errstate(over="ignore"):
        power = np.cumprod(np.concatenate([[np.uint64(1)], np.full(int(blen.max()), _BASE)]))
        left = np.repeat(off[1:] - off[0], blen) - 1 - np.arange(len(data))  # bytes after this one
        return np.add.reduceat(data * power[left], off[:-1] - off[0]), power[blen]


def _greedy_scan(toks: pl.Series, need: dict) -> dict:
    """{n: {d: `_greedy_dup_chars(toks[d], n)`}} for every d in need[n]. The joined n-grams are hashed
    in bulk (`_join_hashes`); the left-to-right loop visits only positions whose n-gram occurred
    before in the document (the rest are first occurrences: seen unless a jump skipped them)."""
    docs = np.unique(np.concatenate([np.asarray(v, np.int64) for v in need.values()]))
    sub = toks.gather(docs)
    ntok = sub.list.len().fill_null(0).to_numpy().astype(np.int64)
    flat = sub.explode().drop_nulls()
    th, pw = _join_hashes(flat)
    start = np.concatenate([[0], np.cumsum(ntok)])
    cs = np.concatenate([[0], np.cumsum(flat.str.len_chars().to_numpy())]).tolist()
    doc = np.repeat(np.arange(len(docs), dtype=np.uint64), ntok)
    out, key, m = {}, th, 1
    for n in sorted(need):
        with np.errstate(over="ignore"):
            if n < m:
                key, m = th, 1
            while m < n:
                key = key[:-1] * pw[m:] + th[m:]
                m += 1
            mixed = key ^ (doc[:len(key)] * _MIX)  # n-grams crossing into the next document are never read
        later = _later_repeats(mixed)
        cand = np.flatnonzero(later)
        ds = need[n]
        s = start[np.searchsorted(docs, ds)]
        e = np.maximum(s, s + ntok[np.searchsorted(docs, ds)] - n + 1)
        cut = np.searchsorted(cand, np.stack([s, e])).T.tolist()
        ids, later, cand = key.tolist(), later.tolist(), cand.tolist()
        res = out[n] = {}
        for d, end, (a, b) in zip(ds.tolist(), e.tolist(), cut):
            dup, i, dead, extra = 0, 0, set(), set()
            for q in cand[a:b]:
                if q < i:
                    continue
                if ids[q] in extra or ids[q] not in dead:  # seen: a repeat, skip n
                    dup += cs[q + n] - cs[q]
                    dead.update([ids[p] for p in range(q + 1, min(q + n, end)) if not later[p]])
                    i = q + n
                else:
                    extra.add(ids[q])
                    i = q + 1
            res[d] = dup
    return out


def _covered_chars(starts: np.ndarray, n: int, doc: np.ndarray, cs: np.ndarray, ndoc: int) -> np.ndarray:
    """Per document: characters of the tokens inside any of the n-grams starting at `starts` (sorted
    rows, each n-gram inside one document; `cs` the cumulative token characters, from 0)."""
    span = np.minimum(n, np.diff(starts, append=len(cs)))  # the next start takes over the overlap
    return np.bincount(doc[starts].astype(np.int64), weights=cs[starts + span] - cs[starts], minlength=ndoc)


def _dup_ngram_fails(grams: _NGrams, toks: pl.Series, lens: np.ndarray, dup_n_grams) -> tuple[dict, int, float]:
    """The duplicate n-gram rules: ({column: fails per document}, documents scanned, scan seconds).

    The greedy scan counts an n-gram seen before and jumps past it, so what it counts are disjoint
    n-grams that each repeat an earlier one: the characters of the tokens covered by the non-first
    occurrences of n-grams bound it from above. Every n0-gram inside a repeated n-gram repeats (n0 the
    smallest n), which gives a cheaper, looser bound for every n at once from one key array; only
    documents over the threshold on both bounds need the exact scan (`_greedy_scan`).
    The bounds compare token n-grams, the scan (as datatrove) their "".join: n-grams whose joins are
    equal with different tokens ("ab" "c" / "a" "bc") count only where the bounds did not already clear
    the document."""
    ndoc, doc = len(lens), grams.doc
    n0 = min(k for k, _ in dup_n_grams)
    r0, key0, _ = grams.grow(n0)
    later = np.zeros(len(doc), dtype=bool)
    later[r0[_later_repeats(key0)]] = True
    pos = np.arange(len(doc))
    run = np.minimum.accumulate(np.where(later, len(doc), pos)[::-1])[::-1] - pos  # repeated n0-grams from here on
    cs = np.concatenate([[0], np.cumsum(grams.tlen)])
    need = {}
    for k, thr in dup_n_grams:  # every n0-gram inside a repeated k-gram repeats too
        need[k] = np.flatnonzero(_covered_chars(np.flatnonzero(run > k - n0), k, doc, cs, ndoc) > thr * lens)
    some = np.unique(np.concatenate(list(need.values())))
    if len(some):  # the exact bound (non-first occurrences of each n), on those documents' tokens only
        mine = np.zeros(ndoc, dtype=bool)
        mine[some] = True
        mine = mine[doc]
        sub = _NGrams(doc[mine], grams.h[mine], grams.tlen[mine])
        cs = np.concatenate([[0], np.cumsum(sub.tlen)])
        for k, thr in sorted(dup_n_grams):
            r, key, _ = sub.grow(k)
            ub = _covered_chars(r[_later_repeats(key)], k, sub.doc, cs, ndoc)
            need[k] = need[k][ub[need[k]] > thr * lens[need[k]]]
    cand = np.unique(np.concatenate(list(need.values())))
    t0 = time.perf_counter()
    dup = _greedy_scan(toks, need) if len(cand) else {k: {} for k in need}
    cols = {}
    for k, thr in dup_n_grams:
        col = cols[f"gopher_repetition:duplicated_{k}_n_grams"] = np.zeros(ndoc, dtype=bool)
        for d, chars in dup[k].items():
            col[d] = chars / lens[d] > thr
    return cols, len(cand), time.perf_counter() - t0


def _repeated_elements(lists: pl.Series) -> dict:
    """Per list (document): elements, repeated elements and their characters (every occurrence after
    an element's first), by 64-bit string hashes over the exploded lists."""
    n = lists.list.len().fill_null(0).to_numpy()
    flat = lists.explode().drop_nulls()  # a split never yields null elements
    doc = np.repeat(np.arange(len(n), dtype=np.uint64), n)
    with np.errstate(over="ignore"):
        rep = _later_repeats(flat.hash().to_numpy() ^ (doc * _MIX))
    d = doc[rep].astype(np.int64)
    return {"n": n, "rep": np.bincount(d, minlength=len(n)),
            "chars": np.bincount(d, weights=flat.str.len_chars().to_numpy()[rep], minlength=len(n))}


def _paragraphs_and_lines(text: pl.Series) -> tuple[pl.Series, dict, dict]:
    """(characters per document, `_repeated_elements` of its paragraphs, of its lines)."""
    t = pl.col("text")
    parts = pl.DataFrame({"text": text}).select(
        n=t.str.len_chars(),
        paras=t.str.strip_chars().str.replace_all(r"\n{2,}", _SEP).str.split(_SEP),
        lines=t.str.replace_all(r"\n+", "\n").str.split("\n"))
    return parts["n"], _repeated_elements(parts["paras"]), _repeated_elements(parts["lines"])


def _token_ngrams(toks: pl.Series, ndoc: int) -> tuple[np.ndarray, _NGrams]:
    """(document of every token, the tokens' `_NGrams`) over the exploded token lists."""
    flat = toks.explode().drop_nulls()  # tokens are never null; an empty list may explode to one
    doc = np.repeat(np.arange(ndoc, dtype=np.uint64), toks.list.len().fill_null(0).to_numpy())
    return doc, _NGrams(doc, flat.hash().to_numpy(), flat.str.len_chars().to_numpy().astype(np.int64))


def _gopher_repetition(text: pl.Series, toks: pl.Series, cfg: GopherRepetitionFilter) -> tuple[pl.DataFrame, int, float]:
    chars, p, ln = _paragraphs_and_lines(text)
    st = pl.DataFrame({"n": chars, "p_frac": p["rep"] / np.maximum(p["n"], 1), "p_chars": p["chars"],
                       "l_frac": ln["rep"] / np.maximum(ln["n"], 1), "l_chars": ln["chars"]})
    c, n = pl.col, pl.col("n")
    out = st.select(
        (n == 0).alias("gopher_repetition:empty"),  # datatrove 0.10.1 returns "empty" first
        _gt(c("p_frac"), cfg.dup_para_frac).alias("gopher_repetition:dup_para_frac"),
        _gt(_ratio(c("p_chars"), n), cfg.dup_para_char_frac).alias("gopher_repetition:dup_para_char_frac"),
        _gt(c("l_frac"), cfg.dup_line_frac).alias("gopher_repetition:dup_line_frac"),
        _gt(_ratio(c("l_chars"), n), cfg.dup_line_char_frac).alias("gopher_repetition:dup_line_char_frac"),
    )
    lens = st["n"].to_numpy()
    doc, grams = _token_ngrams(toks, len(st))
    cap, cap_n = None, None  # the counts' bound of the last size, for the larger sizes after it
    for k, thr in cfg.top_n_grams:
        rows, key, chars = grams.grow(k)
        fails, got = _top_ngram_fails(key, doc[rows].astype(np.int64), chars, k, thr * np.maximum(lens, 1),
                                      cap if cap_n is not None and cap_n < k else None)
        cap, cap_n = got, k
        out = out.with_columns(pl.Series(f"gopher_repetition:top_{k}_gram", fails))
    python_docs, python_s = 0, 0.0
    if cfg.dup_n_grams:
        cols, python_docs, python_s = _dup_ngram_fails(grams, toks, lens, cfg.dup_n_grams)
        out = out.with_columns(**cols)
    return out, python_docs, python_s


def _repetition_values(text: pl.Series, toks: pl.Series, cfg: GopherRepetitionFilter) -> pl.DataFrame:
    """The figures `_gopher_repetition`'s rules compare with their thresholds, per document (exact: every
    document's n-grams counted and scanned; for the few documents the UI explains, not the bulk pass)."""
    chars, p, ln = _paragraphs_and_lines(text)
    lens = chars.to_numpy()
    per = np.maximum(lens, 1)
    cols = {"gopher_repetition:empty": [None] * len(lens),
            "gopher_repetition:dup_para_frac": p["rep"] / np.maximum(p["n"], 1),
            "gopher_repetition:dup_para_char_frac": p["chars"] / per,
            "gopher_repetition:dup_line_frac": ln["rep"] / np.maximum(ln["n"], 1),
            "gopher_repetition:dup_line_char_frac": ln["chars"] / per}
    doc, grams = _token_ngrams(toks, len(lens))
    for k, _ in cfg.top_n_grams:
        rows, key, chars = grams.grow(k)
        cols[f"gopher_repetition:top_{k}_gram"] = _top_ngram_chars(key, doc[rows].astype(np.int64), chars, k,
                                                                    len(lens)) / per
    words = toks.to_list()
    for k, _ in cfg.dup_n_grams:
        cols[f"gopher_repetition:duplicated_{k}_n_grams"] = np.array(
            [_greedy_dup_chars(w or [], k) for w in words], np.float64) / per
    return pl.DataFrame({r: pl.Series(v, dtype=pl.Float64) for r, v in cols.items()})


def _sentences(lines: pl.DataFrame) -> pl.DataFrame:
    """Sentences per line as spaCy's sentencizer counts them: a new one starts at each word token that
    follows a terminal-punctuation token (with only punctuation tokens between)."""
    tok = (lines.select("lid", tok=_presplit(pl.col("line")).str.extract_all(TOKEN_RE)).explode("tok").drop_nulls("tok")
           .with_columns(end=pl.col("tok").str.contains(_SENT_END),
                         word=pl.col("tok").str.contains(r"[^\p{P}]")))
    tok = tok.with_columns(cum=pl.col("end").cum_sum().over("lid")).filter("word")
    # a line that opens with end marks ("." then words) has that "." as a sentence of its own
    starts = pl.col("cum") > pl.col("cum").shift(1).over("lid").fill_null(0)
    return tok.group_by("lid").agg(sent=starts.sum() + 1)


# A sentence starts at a word token (one with a character outside \p{P}; tokens hold no whitespace) after
# a token that is one terminal character: a line without a terminal character followed, anywhere later, by
# a character outside \p{P} and \s has no second sentence (`_presplit` only inserts spaces).
_MAY_START_SENTENCE = f"(?s)[{_cls(TERMINAL_PUNCTUATION)}].*[^\\p{{P}}\\s]"


def _few_words(line: pl.Expr, k: Optional[int]) -> pl.Expr:
    """Fewer than k runs of non-space (`count_matches(r"\\S+") < k`, as a match that stops at the k-th run)."""
    if k is None or k <= 0:
        return pl.lit(False)
    return ~line.str.contains(r"\S+" + (f"(?:\\s+\\S+){{{k - 1}}}" if k > 1 else ""))


def _c4(text: pl.Series, cfg: C4Filter, values: bool = False) -> tuple[pl.DataFrame, pl.Series]:
    """(rule columns, the kept lines joined by newlines per document); `values`: the rules' figures
    (sentences of the kept lines; lorem ipsum and curly brackets are yes/no) instead of the rule columns."""
    ndoc = len(text)
    lines = (pl.DataFrame({"text": text}).with_row_index("doc")
             .select("doc", line=_splitlines(pl.col("text"))).explode("line")
             .with_row_index("lid").with_columns(pl.col("line").str.strip_chars()))
    s = pl.col("line")
    long_word = pl.lit(False) if cfg.max_word_length is None else s.str.contains(f"\\S{{{cfg.max_word_length + 1}}}")
    cleaned = s.str.replace_all(r"\[\d*]|\[edit]|\[citation needed]", "") if cfg.remove_citations else s
    lines = lines.with_columns(few=_few_words(s, cfg.min_words_per_line), long=long_word, line=cleaned)
    low = s.str.to_lowercase()
    no_term = (~s.str.contains(r"[.?!\"']$") | s.str.ends_with("...")) if cfg.filter_no_terminal_punct else pl.lit(False)
    reach = ~pl.col("long") & ~no_term & ~pl.col("few")
    lorem = reach & low.str.contains("lorem ipsum", literal=True) if cfg.filter_lorem_ipsum else pl.lit(False)
    js = reach & ~lorem & low.str.contains("javascript", literal=True) if cfg.filter_javascript else pl.lit(False)
    curly = reach & ~lorem & ~js & s.str.contains("{", literal=True) if cfg.filter_curly_bracket else pl.lit(False)
    pol = (reach & low.str.contains_any(list(cfg.policy_substrings)) if cfg.filter_policy else pl.lit(False))
    lines = lines.with_columns(lorem=lorem, curly=curly, kept=reach & ~lorem & ~js & ~curly & ~pol)
    kept = lines.filter("kept")
    if cfg.min_num_sentences is not None:
        # every kept line holds a sentence: only documents with fewer kept lines than the minimum
        # need their sentences counted
        few_lines = pl.len().over("doc") < cfg.min_num_sentences
        many = pl.col("line").str.contains(_MAY_START_SENTENCE)  # the others hold one sentence
        kept = kept.join(_sentences(kept.filter(few_lines & many)), on="lid", how="left").with_columns(
            pl.col("sent").fill_null(1))
    else:
        kept = kept.with_columns(sent=pl.lit(0))
    per_doc = kept.group_by("doc").agg(sent=pl.col("sent").sum(), out=pl.col("line").str.join("\n"))
    first = lines.group_by("doc").agg(
        lorem=pl.col("lid").filter("lorem").min(), curly=pl.col("lid").filter("curly").min())
    docs = (pl.DataFrame({"doc": pl.int_range(ndoc, eager=True).cast(pl.UInt32)})
            .join(first, on="doc", how="left").join(per_doc, on="doc", how="left"))
    lo, cu = pl.col("lorem"), pl.col("curly")
    if values:
        return docs.select(pl.lit(None, pl.Float64).alias("c4:lorem_ipsum"), pl.lit(None, pl.Float64).alias("c4:curly_bracket"),
                           pl.col("sent").fill_null(0).cast(pl.Float64).alias("c4:too_few_sentences")), \
            docs["out"].fill_null("").str.strip_chars()
    out = docs.select(
        (lo.is_not_null() & (cu.is_null() | (lo <= cu))).alias("c4:lorem_ipsum"),
        (cu.is_not_null() & (lo.is_null() | (cu < lo))).alias("c4:curly_bracket"),
        _lt(pl.col("sent").fill_null(0), cfg.min_num_sentences).alias("c4:too_few_sentences"),
    )
    return out, docs["out"].fill_null("").str.strip_chars()


def _word_counts(out_text: pl.Series, text: pl.Series, toks: Optional[pl.Series]) -> pl.Series:
    """`TOKEN_RE` matches per document of `out_text`: the lengths of `toks` (the tokens of `text`) where
    the text is unchanged, counted only where the C4 modifier rewrote it (or without tokens)."""
    def count(s: pl.Series) -> pl.Series:
        return pl.DataFrame({"t": s}).select(_presplit(pl.col("t")).str.count_matches(TOKEN_RE)).to_series()

    if toks is None:
        return count(out_text)
    n = toks.list.len()
    if out_text is not text:
        at = (out_text != text).arg_true()
        n = n.scatter(at, count(out_text.gather(at))) if len(at) else n
    return n


def _fineweb(text: pl.Series, cfg: FineWebFilter, words: pl.Series, values: bool = False) -> pl.DataFrame:
    """`words`: `TOKEN_RE` matches per document (`_word_counts`); `values`: the figures the rules compare."""
    t = pl.col("text")
    lines = t.str.split("\n").list.eval(pl.element().filter(pl.element().str.strip_chars() != ""))
    nl = lines.list.len()
    _, dup_chars = _dups(lines)
    st = pl.DataFrame({"text": text, "words": words}).select(
        nl=nl,
        punct=lines.list.eval(pl.element().str.contains(_TERMINAL_END)).list.mean(),
        short=lines.list.eval(pl.element().str.len_chars() <= cfg.short_line_length).list.mean(),
        dup=_ratio(dup_chars, t.str.len_chars() - t.str.count_matches("\n", literal=True)),
        newline=_ratio(t.str.count_matches("\n", literal=True), pl.col("words")),
    )
    c = pl.col
    if values:
        return st.select(pl.lit(None, pl.Float64).alias("fineweb:empty"),
                         *(c(col).cast(pl.Float64).alias(f"fineweb:{rule}") for rule, col in (
                             ("line_punct_ratio", "punct"), ("short_line_ratio", "short"),
                             ("char_dup_ratio", "dup"), ("list_ratio", "newline"))))
    punct = _lt(c("punct"), cfg.line_punct_thr)
    if cfg.line_punct_exclude_zero:
        punct = punct & (c("punct") != 0)
    return st.select(
        (c("nl") == 0).alias("fineweb:empty"),
        punct.alias("fineweb:line_punct_ratio"),
        _gt(c("short"), cfg.short_line_thr).alias("fineweb:short_line_ratio"),
        _gt(c("dup"), cfg.char_duplicates_ratio).alias("fineweb:char_dup_ratio"),
        _gt(c("newline"), cfg.new_line_ratio).alias("fineweb:list_ratio"),
    )


# -- the cascade ---------------------------------------------------------------------------------------


def apply_filters(texts, config: FilterConfig = FilterConfig()) -> FilterResult:
    """Evaluate every enabled filter on every document of the batch (see the module docstring)."""
    text = _as_series(texts).fill_null("")
    n = len(text)
    frames, seconds, python_docs = [], {}, 0
    out_text = text
    toks = None
    for name in FILTER_ORDER:
        cfg = getattr(config, name)
        if not cfg.enabled:
            continue
        t0 = time.perf_counter()
        if name in ("gopher_quality", "gopher_repetition") and toks is None:
            toks = _tokens(text)
        if name == "sanity":
            frames.append(_sanity(text, cfg))
        elif name == "gopher_quality":
            frames.append(_gopher_quality(text, toks, cfg))
        elif name == "gopher_repetition":
            f, python_docs, seconds["gopher_repetition:python_scan"] = _gopher_repetition(text, toks, cfg)
            frames.append(f)
        elif name == "c4":
            f, rewritten = _c4(text, cfg)
            frames.append(f)
            if cfg.mode == "modify":
                c4_keep = ~f.select(pl.any_horizontal(pl.all())).to_series()
                out_text = pl.select(pl.when(c4_keep).then(rewritten).otherwise(text)).to_series()
        elif name == "fineweb":
            frames.append(_fineweb(out_text, cfg, _word_counts(out_text, text, toks)))
        seconds[name] = time.perf_counter() - t0
    failed_df = pl.concat(frames, how="horizontal") if frames else pl.DataFrame(height=n)
    rules = failed_df.columns
    reason = _first_reason(failed_df, rules) if rules else pl.Series([None] * n, dtype=pl.String)
    filter_reason = {}
    for name in FILTER_ORDER:
        own = [r for r in rules if r.split(":")[0] == name]
        if own:
            filter_reason[name] = _first_reason(failed_df, own).to_list()
    failed = {r: failed_df[r].to_numpy() for r in rules}
    stats = {r: {"failed_documents": int(failed[r].sum()), "first_failure_documents": int((reason == r).sum())}
             for r in rules}
    return FilterResult(
        keep=reason.is_null().to_numpy(), reason=reason.to_list(), texts=out_text.to_arrow(),
        failed=failed, filter_reason=filter_reason, stats=stats, seconds=seconds, python_docs=python_docs)


# -- why a document was rejected: the measured figure beside its threshold -------------------------------


@dataclass(frozen=True)
class Measure:
    """A rule's measured figure on one document beside its threshold (`op`: the rule fires when
    `value op threshold`); value None for a yes/no rule (a NUL byte, lorem ipsum, a curly bracket)."""

    rule: str
    value: Optional[float]
    op: str
    threshold: Optional[float]

    def __str__(self) -> str:
        if self.value is None or self.threshold is None:
            return self.rule
        return f"{self.rule} {compared(self.value, self.threshold, self.op)}"


def compared(value: float, threshold: float, op: str) -> str:
    """`0.78 < 0.80`: integers as integers, other figures with as many decimals (2 to 6) as it takes for
    the two to read differently."""
    if float(value).is_integer() and float(threshold).is_integer():
        return f"{int(value):,} {op} {int(threshold):,}"
    for d in range(2, 7):
        a, b = f"{value:,.{d}f}", f"{threshold:,.{d}f}"
        if a != b:
            break
    return f"{a} {op} {b}"


def thresholds(config: FilterConfig) -> dict[str, tuple[str, Optional[float]]]:
    """rule -> (op, threshold) of every rule of `config` (`sanity:control_chars`'s is per document)."""
    sa, gq, gr, c4, fw = (config.sanity, config.gopher_quality, config.gopher_repetition, config.c4, config.fineweb)
    out = {"sanity:empty": ("<", sa.min_chars), "sanity:binary": ("", None), "sanity:control_chars": (">", None),
           "sanity:too_long": (">", sa.max_chars),
           "gopher_quality:min_doc_words": ("<", gq.min_doc_words), "gopher_quality:max_doc_words": (">", gq.max_doc_words),
           "gopher_quality:min_avg_word_length": ("<", gq.min_avg_word_length),
           "gopher_quality:max_avg_word_length": (">", gq.max_avg_word_length),
           "gopher_quality:hash_ratio": (">", gq.max_symbol_word_ratio),
           "gopher_quality:ellipsis_ratio": (">", gq.max_symbol_word_ratio),
           "gopher_quality:bullet_lines": (">", gq.max_bullet_lines_ratio),
           "gopher_quality:ellipsis_lines": (">", gq.max_ellipsis_lines_ratio),
           "gopher_quality:alpha_words": ("<", gq.min_alpha_words_ratio),
           "gopher_quality:stop_words": ("<", gq.min_stop_words),
           "gopher_repetition:empty": ("", None),
           "gopher_repetition:dup_para_frac": (">", gr.dup_para_frac),
           "gopher_repetition:dup_para_char_frac": (">", gr.dup_para_char_frac),
           "gopher_repetition:dup_line_frac": (">", gr.dup_line_frac),
           "gopher_repetition:dup_line_char_frac": (">", gr.dup_line_char_frac),
           **{f"gopher_repetition:top_{k}_gram": (">", t) for k, t in gr.top_n_grams},
           **{f"gopher_repetition:duplicated_{k}_n_grams": (">", t) for k, t in gr.dup_n_grams},
           "c4:lorem_ipsum": ("", None), "c4:curly_bracket": ("", None),
           "c4:too_few_sentences": ("<", c4.min_num_sentences),
           "fineweb:empty": ("", None), "fineweb:line_punct_ratio": ("<", fw.line_punct_thr),
           "fineweb:short_line_ratio": (">", fw.short_line_thr), "fineweb:char_dup_ratio": (">", fw.char_duplicates_ratio),
           "fineweb:list_ratio": (">", fw.new_line_ratio)}
    return out


def measure(texts, config: FilterConfig = FilterConfig()) -> list[dict[str, Measure]]:
    """Per document, every enabled rule's `Measure`: the figure `apply_filters` compares with the rule's
    threshold, computed the same way (FineWeb on the C4-rewritten text in mode "modify"). For the few
    documents the UI explains: the repetition figures are exact per document, not the bulk pass's bounds."""
    text = _as_series(texts).fill_null("")
    frames, toks, out_text = [], None, text
    for name in FILTER_ORDER:
        cfg = getattr(config, name)
        if not cfg.enabled:
            continue
        if name in ("gopher_quality", "gopher_repetition") and toks is None:
            toks = _tokens(text)
        if name == "sanity":
            frames.append(_sanity(text, cfg, values=True))
        elif name == "gopher_quality":
            frames.append(_gopher_quality(text, toks, cfg, values=True))
        elif name == "gopher_repetition":
            frames.append(_repetition_values(text, toks, cfg))
        elif name == "c4":
            flags, rewritten = _c4(text, cfg)
            frames.append(_c4(text, cfg, values=True)[0])
            if cfg.mode == "modify":
                c4_keep = ~flags.select(pl.any_horizontal(pl.all())).to_series()
                out_text = pl.select(pl.when(c4_keep).then(rewritten).otherwise(text)).to_series()
        elif name == "fineweb":
            frames.append(_fineweb(out_text, cfg, _word_counts(out_text, text, toks), values=True))
    if not frames:
        return [{} for _ in range(len(text))]
    vals = pl.concat(frames, how="horizontal").to_dicts()
    thr = thresholds(config)
    out = []
    for row in vals:
        limit = row.pop("sanity:control_chars:limit", None)
        out.append({r: Measure(r, v, thr[r][0], limit if r == "sanity:control_chars" else thr[r][1])
                    for r, v in row.items()})
    return out
