"""PII redaction as a text modifier: emails, public IPv4 / IPv6 addresses and phone numbers become typed
placeholders (`<EMAIL>`, `<IPV4>`, `<IPV6>`, `<PHONE>`), in bulk over a batch with Arrow's RE2 regex
kernels (no Python loop per document), with per-rule counts per document and a scrub manifest.

Prior art (read, not copied): datatrove's `PIIFormatter` (formatters/pii.py) replaces emails and IPv4
addresses that `ipaddress.ip_address(m).is_global` accepts with fixed fake values in rotation; dolma's
regex tagger (taggers/pii.py) tags emails, US-style phones and IPv4, and skips phone / IP hits whose
context holds "isbn", "doi" or "#". Here the patterns are conservative (a miss is better than
mangling a date, a price or an ISBN); what each one misses is in its `misses`, and docs/filters.md.

RE2 has no look-around, so every pattern captures its left and right boundary characters as groups 1
and 2 and writes them back (`\\1<TAG>\\2`). Two matches that share a boundary character (`1.1.1.1
8.8.8.8`) cannot both match in one pass, so each rule runs twice; a pass never finds a new match
inside a placeholder. Counts are placeholders after a rule minus placeholders before it (a text that
already held `<EMAIL>` is not counted again).

The patterns are written in ASCII and widened once at import (`_widen`): every ASCII character in them
also matches its full-width form, which NFKC folds to it (`４１５－５５５－２６７１`, `２６０６：４７００：：１`),
a space also the no-break / figure / narrow / ideographic spaces, and every digit also the same digit in
Arabic-Indic, Extended Arabic-Indic and Devanagari. Matching a folded copy instead would need the match
spans to redact the original, which Arrow's RE2 replace does not return (and a per-document Python loop
is what this module avoids); matching the text itself keeps every offset exact.

Bump `SCRUB_RULES_VERSION` whenever a pattern or placeholder changes: the manifest records both the
version and each pattern's sha256, so a revision says exactly which rules scrubbed it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mix_assets.core.textkeys import text_array

SCRUB_RULES_VERSION = "3"


@dataclass(frozen=True)
class PiiRule:
    name: str
    placeholder: str
    pattern: str  # RE2; group 1 = left boundary, group 2 = right boundary, both written back
    misses: str  # what it deliberately or knowingly does not redact

    @property
    def pattern_sha256(self) -> str:
        return hashlib.sha256(self.pattern.encode()).hexdigest()


# Widening (module docstring): full-width forms are U+FF01-FF5E, the spaces are those NFKC folds to ' ',
# and other scripts' digits are those of `EXTRA_DIGIT_ZEROS`. A number may mix forms (`１-415-555-2671`).
EXTRA_DIGIT_ZEROS = (0x0660, 0x06F0, 0x0966)  # Arabic-Indic, Extended Arabic-Indic (Persian, Urdu), Devanagari
_SPACES = "\u00a0\u2007\u202f\u3000"
_CLASS_SPECIAL = set("\\]^-[")


def _forms(lo: str, hi: str) -> list[tuple[str, str]]:
    """The code point ranges `lo`-`hi` (one ASCII range of a pattern) stands for once widened."""
    out = [(lo, hi)]
    if lo == hi == " ":
        return out + [(c, c) for c in _SPACES]
    if not ("!" <= lo <= hi <= "~"):
        return out
    out.append((chr(ord(lo) + 0xFEE0), chr(ord(hi) + 0xFEE0)))
    digits = lo <= "9" and hi >= "0"
    if digits and not ("0" <= lo and hi <= "9"):
        raise ValueError(f"_widen: range {lo}-{hi} mixes digits with other characters")
    if digits:
        out += [(chr(z + ord(lo) - 48), chr(z + ord(hi) - 48)) for z in EXTRA_DIGIT_ZEROS]
    return out


def _class_text(ranges: list[tuple[str, str]]) -> str:
    esc = lambda c: "\\" + c if c in _CLASS_SPECIAL else c  # noqa: E731
    return "".join(esc(a) if a == b else f"{esc(a)}-{esc(b)}" for a, b in ranges)


def _widen(pattern: str) -> str:
    """`pattern` (RE2, ASCII literals) with every literal, class and `\\d` widened as described above.
    Only the syntax these rules use is accepted; any other escape fails (nothing goes unwidened)."""
    out, i, n = [], 0, len(pattern)

    def prop(j):  # `\pL`, `\PL` or `\p{..}` starting at pattern[j] == "\\": (its text, the index after it)
        end = pattern.index("}", j) + 1 if pattern[j + 2] == "{" else j + 3
        return pattern[j:end], end

    while i < n:
        c = pattern[i]
        if c == "[":
            j, neg, items, props = i + 1, "", [], []
            if pattern[j] == "^":
                neg, j = "^", j + 1
            while pattern[j] != "]":
                if pattern[j] == "\\" and pattern[j + 1] in "pP":
                    text, j = prop(j)
                    props.append(text)
                    continue
                if pattern[j] == "\\" and pattern[j + 1] == "d":
                    items.append(("0", "9"))
                    j += 2
                    continue
                if pattern[j] == "\\":
                    lo, j = pattern[j + 1], j + 2
                else:
                    lo, j = pattern[j], j + 1
                hi = lo
                if pattern[j] == "-" and pattern[j + 1] != "]":
                    hi = pattern[j + 2] if pattern[j + 1] == "\\" else pattern[j + 1]
                    j += 3 if pattern[j + 1] == "\\" else 2
                items.append((lo, hi))
            out.append(f"[{neg}{''.join(props)}{_class_text([f for r in items for f in _forms(*r)])}]")
            i = j + 1
        elif c == "\\":
            nxt = pattern[i + 1]
            if nxt in "pP":
                text, i = prop(i)
                out.append(text)
                continue
            if nxt == "d":
                out.append(f"[{_class_text(_forms('0', '9'))}]")
            elif nxt.isalnum():
                raise ValueError(f"_widen: escape \\{nxt} at {i} is not supported")
            else:
                out.append(f"[{_class_text(_forms(nxt, nxt))}]")
            i += 2
        elif c == "{":
            j = pattern.index("}", i) + 1
            if not re.fullmatch(r"\{\d+(,\d*)?\}", pattern[i:j]):
                raise ValueError(f"_widen: {{ at {i} is not a counted repetition")
            out.append(pattern[i:j])
            i = j
        elif c in "()|?*+^$":
            if c == "(" and pattern.startswith("(?:", i):
                out.append("(?:")
                i += 3
                continue
            out.append(c)
            i += 1
        else:
            out.append(f"[{_class_text(_forms(c, c))}]" if len(_forms(c, c)) > 1 else c)
            i += 1
    return "".join(out)


_W = r"\pL\pN_"  # "word" characters, Unicode-aware (RE2's \w is ASCII only)
# Markdown emphasis: a run of `_` with no word character outside it is a boundary (`_415-555-2671_`,
# `__8.8.8.8__`); inside a word it is not (`tel_415-555-2671`)
_EMPH_L = rf"(?:^|[^{_W}])_+"
_EMPH_R = rf"_+(?:$|[^{_W}])"
# Han, Hiragana and Katakana are written without spaces between words: a number glued to them is still
# one (`電話４１５－５５５－２６７１です`), unlike one glued to a Latin word (`v1.2.3.4`)
_CJK = r"[\p{Han}\p{Hiragana}\p{Katakana}]"

_LOCAL = r"[\pL\pN!#$%&'*+/=?^_`{|}~-]+(?:\.[\pL\pN!#$%&'*+/=?^_`{|}~-]+)*"
_LABEL = r"[\pL\pN](?:[\pL\pN-]*[\pL\pN])?"
EMAIL = _widen(rf"()(?:{_LOCAL}@(?:{_LABEL}\.)+\pL\pL+)()")  # {2,63} would cost RE2 0.3 s to compile

_O = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"  # an octet, no leading zero
_ANY3 = rf"\.{_O}\.{_O}\.{_O}"
# Public (global) IPv4 only, as datatrove's is_global validator keeps it, spelled as ranges because RE2
# cannot say "not": first octets with no reserved block (not 0, 10, 127, >= 224, nor the six below) ...
_FIRST = r"(?:[1-9]|1[1-9]|[2-9]\d|10[1-9]|11\d|12[0-689]|1[3-5]\d|16[0-8]|17[013-9]|18\d|19[013-79]" \
         r"|20[0-24-9]|21\d|22[0-3])"
_IPV4_BODY = "|".join([
    rf"{_FIRST}{_ANY3}",
    # ... and the six first octets that hold a reserved block, minus that block:
    rf"100\.(?:[1-5]?\d|6[0-3]|12[89]|1[3-9]\d|2[0-4]\d|25[0-5])\.{_O}\.{_O}",  # 100.64/10 shared
    rf"169\.(?:[1-9]?\d|1\d\d|2[0-4]\d|25[0-35])\.{_O}\.{_O}",  # 169.254/16 link-local
    rf"172\.(?:\d|1[0-5]|3[2-9]|[4-9]\d|1\d\d|2[0-4]\d|25[0-5])\.{_O}\.{_O}",  # 172.16/12 private
    rf"192\.(?:[1-9]\d?|1[0-5]\d|16[0-79]|1[7-9]\d|2[0-4]\d|25[0-5])\.{_O}\.{_O}",  # 192.168/16 private
    rf"192\.0\.(?:1|[3-9]|[1-9]\d|1\d\d|2[0-4]\d|25[0-5])\.{_O}",  # 192.0.0/24 IETF, 192.0.2/24 docs
    rf"198\.(?:\d|1[0-7]|[2-4]\d|5[02-9]|[6-9]\d|1\d\d|2[0-4]\d|25[0-5])\.{_O}\.{_O}",  # 198.18/15 bench
    rf"198\.51\.(?:[1-9]?\d|10[1-9]|1[1-9]\d|2[0-4]\d|25[0-5])\.{_O}",  # 198.51.100/24 docs
    rf"203\.(?:[1-9]\d?|1\d\d|2[0-4]\d|25[0-5])\.{_O}\.{_O}",
    rf"203\.0\.(?:[1-9]?\d|10\d|11[0-24-9]|1[2-9]\d|2[0-4]\d|25[0-5])\.{_O}",  # 203.0.113/24 docs
])
# Not inside a longer dotted run (1.2.3.4.5) nor glued to a word; one sentence-final dot is fine.
IPV4 = _widen(rf"(^|[^{_W}.]|{_EMPH_L}|{_CJK})(?:{_IPV4_BODY})(\.?(?:$|[^{_W}.])|{_EMPH_R}|{_CJK})")

_H = r"[0-9A-Fa-f]{1,4}"
_G1 = r"[23][0-9A-Fa-f]{3}"  # global unicast 2000::/3 written in full: timestamps never start so
# A colon on the left is a boundary after a word that cannot be a hex group (`IPv6:`, `host:`: it holds a
# letter past f, or `_`), or after a non-word character; after a hex group (`fd00:2345::1`) it would cut
# a longer address. On the right, one `:` or `.` then a non-word character ends it (`…::1111: ok`).
_NONHEX = r"(?:[^\PLa-fA-F]|_)"
IPV6 = _widen(rf"(^|[^{_W}:]|{_EMPH_L}|{_CJK}|(?:^|[^{_W}:]|{_NONHEX}[{_W}]*):)"
              rf"(?:{_G1}(?::{_H}){{7}}|{_G1}(?::{_H}){{0,5}}::(?:{_H}(?::{_H}){{0,5}})?)"
              rf"([.:]?(?:$|[^{_W}:.])|{_EMPH_R}|{_CJK})")

_NANP = (r"(?:\+?1[ .-]?)?(?:\([2-9]\d\d\) ?[2-9]\d\d[ .-]\d{4}|[2-9]\d\d-[2-9]\d\d-\d{4}"
         r"|[2-9]\d\d\.[2-9]\d\d\.\d{4})")
_INTL = (r"\+[1-9]\d{0,2}[ .-]\(?\d{1,4}\)?(?:(?:[ .-]\d{2,4}){2,4}|[ .-]\d{5,10})"
         r"|\+[1-9]\d{9,14}")
# Left: one non-word character other than the joiners `+-./`; or a joiner after a non-word non-joiner
# (` +`, ` -`, `>/`); or a dot after a letter (`Tel.`); or a slash after a digit (`…2671/415-…`). Not a
# joiner after a digit (`978-…`, `1.…`: a longer number), nor a slash after a letter (a URL path).
# Right: a joiner then a non-word character (or the end), or a slash then a digit (the next number of a
# `/` list, which the second pass redacts).
PHONE = _widen(rf"(^|[^{_W}+\-./]|(?:^|[^{_W}+\-./])[+\-./]|\pL\.|\d/|{_EMPH_L}|{_CJK})"
               rf"(?:{_INTL}|{_NANP})([.\-/]?(?:$|[^{_W}\-./])|/\d|{_EMPH_R}|{_CJK})")

RULES: tuple[PiiRule, ...] = (
    PiiRule("email", "<EMAIL>", EMAIL,
            "obfuscated forms (`a [at] b [dot] com`), IP-literal domains (`a@[1.2.3.4]`), dotless domains "
            "(`root@localhost`); matches non-addresses shaped like one (`git@github.com`, `logo@2x.png`)"),
    PiiRule("ipv6", "<IPV6>", IPV6,
            "digits of scripts other than ASCII, full-width, Arabic-Indic and Devanagari; anything outside "
            "2000::/3 (link-local fe80::, ULA fc00::/7, ::1), a first group written with "
            "fewer than 4 digits, embedded IPv4 (`::ffff:1.2.3.4`), one glued to a word, or after a hex "
            "group and `:` (`dead:2001:db8::1` reads as one longer address); the 2001:db8::/32 docs prefix "
            "is redacted"),
    PiiRule("ipv4", "<IPV4>", IPV4,
            "dots other than `.` / U+FF0E (`。`, `・`); digits of scripts other than ASCII, full-width, "
            "Arabic-Indic and Devanagari; private, loopback, link-local, shared, multicast, reserved and documentation ranges (not "
            "personal); octets with leading zeros; a dotted quad glued to a letter (`v1.2.3.4`) or "
            "inside a longer dotted run. A four-part version `1.2.3.4` after a space IS redacted."),
    PiiRule("phone", "<PHONE>", PHONE,
            "dashes other than `-` / U+FF0D as separators (en dash, U+2011 non-breaking hyphen); digits "
            "of scripts other than ASCII, full-width, Arabic-Indic and Devanagari; "
            "numbers without separators unless `+` and 10-15 digits; national formats outside North "
            "America (`030 1234567`, `06 12 34 56 78`, `(0)30`); NANP numbers separated by spaces only "
            "or with area / exchange starting 0/1; extensions; vanity numbers (`1-800-FLOWERS`); one glued "
            "to a word, after a letter and `/` (a URL path) or after a digit and `.`, `-` or `+` (a longer "
            "number)"),
)


def scrub(texts: Sequence[str] | pa.Array | pa.ChunkedArray,
          rules: Sequence[PiiRule] = RULES) -> tuple[pa.Array, pa.Table]:
    """The texts with every rule's matches replaced by its placeholder (rules in order), and a table
    with one int32 column per rule name: the redactions in each document."""
    if not rules:
        raise ValueError("scrub: no rules")
    arr = text_array(texts, "scrub")
    counts = {}
    for rule in rules:
        before = pc.count_substring(arr, rule.placeholder)
        for _ in range(2):
            arr = pc.replace_substring_regex(arr, rule.pattern, rf"\1{rule.placeholder}\2")
        counts[rule.name] = pc.cast(pc.subtract(pc.count_substring(arr, rule.placeholder), before), pa.int32())
    return arr, pa.table(counts)


def rules_manifest(rules: Sequence[PiiRule] = RULES) -> list[dict]:
    return [{"name": r.name, "placeholder": r.placeholder, "pattern": r.pattern,
             "pattern_sha256": r.pattern_sha256, "misses": r.misses} for r in rules]


def source_counts(counts: pa.Table, rules: Sequence[PiiRule] = RULES) -> dict:
    """One source's block of the scrub manifest from `scrub`'s table: documents, documents changed and
    redactions per rule. Blocks of batches of one source add up with `add_source_counts`."""
    names = [r.name for r in rules]
    missing = [n for n in names if n not in counts.column_names]
    if missing:
        raise ValueError(f"scrub_manifest: counts has no column for rule(s) {missing}")
    rows = (np.column_stack([counts.column(n).to_numpy() for n in names]) if counts.num_rows
            else np.zeros((0, len(names)), np.int64))
    return {"docs": int(len(rows)), "scrubbed_docs": int((rows.sum(axis=1) > 0).sum()),
            "redactions": {n: int(v) for n, v in zip(names, rows.sum(axis=0))}}


def add_source_counts(a: dict, b: dict) -> dict:
    """Two blocks of `source_counts` (of disjoint documents) as one."""
    return {"docs": a["docs"] + b["docs"], "scrubbed_docs": a["scrubbed_docs"] + b["scrubbed_docs"],
            "redactions": {n: a["redactions"].get(n, 0) + b["redactions"].get(n, 0)
                           for n in dict.fromkeys([*a["redactions"], *b["redactions"]])}}


def rules_sha256(rules: Sequence[PiiRule] = RULES) -> str:
    """sha256 over the rule set: each pattern's sha256 and placeholder, in order."""
    return hashlib.sha256("\n".join(r.pattern_sha256 + r.placeholder for r in rules).encode()).hexdigest()


def manifest_from_sources(by_source: dict, rules: Sequence[PiiRule] = RULES, **extra) -> dict:
    """The scrub manifest from per-source blocks (`source_counts`), sources in name order."""
    return {"rules_version": SCRUB_RULES_VERSION, "rules_sha256": rules_sha256(rules),
            "rules": rules_manifest(rules), "sources": {s: by_source[s] for s in sorted(by_source)}, **extra}


def rules_named(names: Sequence[str]) -> tuple[PiiRule, ...]:
    """The rules called `names`, in `RULES` order (the order they run in)."""
    unknown = set(names) - {r.name for r in RULES}
    if unknown:
        raise ValueError(f"unknown PII rule(s) {sorted(unknown)}; known: {[r.name for r in RULES]}")
    return tuple(r for r in RULES if r.name in names)


def scrub_manifest(counts: pa.Table, sources: Sequence[str] | pa.Array,
                   rules: Sequence[PiiRule] = RULES, **extra) -> dict:
    """What the scrub did, to publish with the revision (JSON-ready, key order fixed): the rules' version,
    patterns and their sha256, and per source the documents seen, documents changed and redactions per
    rule. `counts` is `scrub`'s table (chunks concatenated); `sources` names each row's source; `extra`
    (e.g. a revision or input fingerprint) is recorded as given."""
    source_counts(counts.slice(0, 0), rules)  # a missing rule column fails before anything else
    src = np.asarray(sources.to_pylist() if isinstance(sources, (pa.Array, pa.ChunkedArray)) else sources,
                     dtype=object)
    if len(src) != counts.num_rows:
        raise ValueError(f"scrub_manifest: {len(src)} sources for {counts.num_rows} rows of counts")
    by_source = {s: source_counts(counts.filter(pa.array(src == s)), rules) for s in sorted(set(src.tolist()))}
    return manifest_from_sources(by_source, rules, **extra)
