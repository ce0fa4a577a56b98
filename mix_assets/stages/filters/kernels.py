"""The text kernels the filter rules share (polars / numpy over a batch of texts, no Dagster).

Character sets as datatrove 0.10.1 has them (utils/text.py), the spaCy-like word split (`TOKEN_RE`: datatrove
splits English with spaCy's blank "en" tokenizer, where punctuation becomes tokens, and the Gopher "alphabetic
words" and FineWeb "newlines per word" rules count those tokens; `TOKEN_RE` is one regular expression that
reproduces that split on ordinary prose, bench/filters.py measures the decisions it gives against
datatrove's), line splitting, the null-safe comparisons every rule uses, and the rolling 64-bit n-gram keys
grouped by plain `np.sort`s (no group-bys, no stable argsorts).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import polars as pl


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


def char_class(chars) -> str:
    """A regex character class body matching exactly these characters (each one \\x{..}-escaped)."""
    return "".join(f"\\x{{{ord(c):X}}}" for c in sorted(set(chars)))


# spaCy English tokenizer exceptions that keep their final "." (spacy/lang/en/tokenizer_exceptions.py)
_ABBREV = (
    "Adm Ak Ala Apr Ariz Ark Aug Bros Calif Co Colo Conn Corp Dec Del Dr Feb Fla Ga Gen Gov Ia Id Ill Inc "
    "Ind Jan Jr Jul Jun Kan Kans Ky La Ltd Mar Mass Md Messrs Mich Minn Miss Mo Mont Mr Mrs Ms Mt Neb Nebr "
    "Nev Nov Oct Okla Ore Pa Prof Rep Rev Sen Sep Sept St Tenn Va Wash Wis co vs"
).split()
# One pass over the text (after `presplit`) gives spaCy-like tokens: URLs; contraction suffixes and
# 'em 'cause ("'tis" is "'" + "tis"); dotted acronyms, abbreviations, single letters with a dot ("p.", "J."); "..."
# is one token; "1.B." keeps its dot (spaCy splits a final "." only after a lower-case letter, a digit
# or two capitals); letters and digits joined by . : + & ' , by / and , before a digit, and by (,)-- where
# presplit left them ("body,--for") stay one word, with hyphens at either end ("-word", "yet--");
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


def presplit(col: pl.Expr) -> pl.Expr:
    """Spaces where spaCy splits inside a word ("don't" -> "do n't", "co-op" -> "co - op")."""
    for pat, rep in _PRESPLIT:
        col = col.str.replace_all(pat, rep)
    return col


# str.splitlines() boundaries (it also drops one trailing empty line)
_LINE_BOUNDARY = "\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]"
SEP = "\ue000"  # private-use separator for regex splits (polars str.split is literal)


def splitlines(col: pl.Expr) -> pl.Expr:
    return col.str.replace_all(_LINE_BOUNDARY, "\n").str.replace(r"\n$", "").str.split("\n")


def dups(lst: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """(repeated elements, their characters): every occurrence after an element's first."""
    rep = lst.list.eval(pl.element().is_first_distinct().not_())
    chars = lst.list.eval(pl.element().filter(pl.element().is_first_distinct().not_()).str.len_chars())
    return rep.list.sum(), chars.list.sum()


def ratio(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """a / b, null where b is 0 (a rule on a ratio never fires on an empty denominator)."""
    return pl.when(b > 0).then(a / b)


def gt(x, thr):
    """x > thr as bool (null -> False); thr None -> never."""
    return pl.lit(False) if thr is None else (x > thr).fill_null(False)


def lt(x, thr):
    return pl.lit(False) if thr is None else (x < thr).fill_null(False)


def tokens(text: pl.Series) -> pl.Series:
    return pl.DataFrame({"text": text}).select(presplit(pl.col("text")).str.extract_all(TOKEN_RE)).to_series()


def word_counts(out_text: pl.Series, text: pl.Series, toks: Optional[pl.Series]) -> pl.Series:
    """`TOKEN_RE` matches per document of `out_text`: the lengths of `toks` (the tokens of `text`) where
    the text is unchanged, counted only where the C4 modifier rewrote it (or without tokens)."""
    def count(s: pl.Series) -> pl.Series:
        return pl.DataFrame({"t": s}).select(presplit(pl.col("t")).str.count_matches(TOKEN_RE)).to_series()

    if toks is None:
        return count(out_text)
    n = toks.list.len()
    if out_text is not text:
        at = (out_text != text).arg_true()
        n = n.scatter(at, count(out_text.gather(at))) if len(at) else n
    return n


MIX = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier of the rolling n-gram hash


class NGrams:
    """Rolling 64-bit keys of every token n-gram of a batch (numpy, wrapping arithmetic), the document
    mixed in, so equal keys mean equal n-grams of the same document (bar a 2^-64 collision). Tokens are
    flat arrays grouped by document in order."""

    def __init__(self, doc: np.ndarray, h: np.ndarray, tlen: np.ndarray):
        self.doc, self.h, self.tlen = doc, h, tlen
        self.n, self.key, self.chars = 1, self._start(), tlen

    def _start(self) -> np.ndarray:
        with np.errstate(over="ignore"):
            return self.h ^ (self.doc * MIX)  # the document mixed in: equal keys, same document

    def grow(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(start rows, keys, characters of the n tokens) of the n-grams inside one document."""
        if n < self.n:  # restart (configured n-gram sizes out of order)
            self.n, self.key, self.chars = 1, self._start(), self.tlen
        with np.errstate(over="ignore"):
            while self.n < n:
                m = len(self.key) - 1
                self.key = self.key[:m] * MIX + self.h[self.n:self.n + m]
                self.chars = self.chars[:m] + self.tlen[self.n:self.n + m]
                self.n += 1
        m = len(self.key)
        rows = np.flatnonzero(self.doc[:m] == self.doc[self.n - 1:self.n - 1 + m])
        return rows, self.key[rows], self.chars[rows]


def fmix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser (a bijection): spreads a difference in the low bits to the high ones."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(33))) * np.uint64(0xFF51AFD7ED558CCD)
        x = (x ^ (x >> np.uint64(33))) * np.uint64(0xC4CEB9FE1A85EC53)
        return x ^ (x >> np.uint64(33))


def key_groups(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, starts): the rows of `key` ordered so that equal keys are consecutive, in row order within
    a run, and the index in `rows` where each run starts. One plain sort of (the key's high bits, row),
    ~10x faster than a stable argsort; runs of equal high bits holding unequal keys (a few per million)
    are then ordered by (key, row)."""
    n = len(key)
    rb = np.uint64(max(1, n.bit_length()))
    s = np.sort((fmix(key) >> rb << rb) | np.arange(n, dtype=np.uint64))
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


def later_repeats(key: np.ndarray) -> np.ndarray:
    """True where an equal key occurs earlier in the array (every occurrence of a key but its first)."""
    rows, starts = key_groups(key)
    out = np.ones(len(key), dtype=bool)
    out[rows[starts]] = False
    return out
