"""Issue 25 §2.3: every printable ASCII character on each side of each rule's examples (an exhaustive loop:
hypothesis is not installed). A character that cannot be part of the token leaves the PII redacted and is
kept beside its placeholder. A character that can be part of it makes a longer token, judged on its own;
`expected` says what each rule makes of it and why. The same cases written in full-width forms and in
other scripts' digits must come out the same (issue 25, PII verification: `４１５-５５５-２６７１` survived)."""

import ipaddress
import re
import string

import pytest

from mix_assets.core.pii import scrub

EXAMPLES = {
    "<EMAIL>": ["john.doe@example.com", "x_y@sub.example.org"],
    "<IPV6>": ["2606:4700:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001:81b:0:0:0:200e"],
    "<IPV4>": ["8.8.8.8", "93.184.216.34"],
    "<PHONE>": ["415-555-2671", "(415) 555-2671", "415.555.2671", "+44 20 7946 0958", "+14155552671",
                "1-800-555-2671"],
}
PRINTABLE = [chr(i) for i in range(0x20, 0x7F)]
WORD = set(string.ascii_letters + string.digits + "_")
EMAIL_LOCAL = set(string.ascii_letters + string.digits + "!#$%&'*+/=?^_`{|}~-")
NANP_NO_CC = re.compile(r"^\(?[2-9]\d\d")  # a North American number written without its country code


def expected(tag: str, ex: str, side: str, c: str) -> str:
    """What `scrub` must make of `c + ex` (side "L") or `ex + c` ("R"): "kept" (the PII redacted, `c`
    beside the placeholder), "whole" (`c` is part of the token and is redacted with it) or "unchanged"
    (`c` makes a longer token that is not this PII, or that the rule leaves alone by design)."""
    if tag == "<EMAIL>":
        # local-part characters on the left, letters on the right (the TLD goes on): one longer address
        return "whole" if (c in EMAIL_LOCAL if side == "L" else c.isalpha()) else "kept"
    if c == "_":
        # markdown emphasis (`_415-555-2671_`, common in web text): a run of `_` with no word character
        # beyond it is a boundary; inside a word it is not (`tel_415-555-2671`, in KEPT below)
        return "kept"
    if c in WORD and not c.isdigit():
        # glued to a letter or `_` it is one word, not an address or number (`v1.2.3.4`, `A415-555-2671`,
        # a hex string); a word then `:` or `.` is a boundary (`IPv6:…`, `Tel.…`), tested below
        return "unchanged"
    if c.isdigit():
        if tag == "<IPV6>":  # a fifth digit in the first / last group: not an IPv6 group
            return "unchanged"
        if tag == "<IPV4>":  # a longer octet: redacted only if the longer quad is itself a public address
            quad = c + ex if side == "L" else ex + c
            try:
                ip = ipaddress.ip_address(quad)
            except ValueError:  # an octet above 255 or with a leading zero
                return "unchanged"
            return "whole" if ip.is_global and not ip.is_multicast else "unchanged"
        # phone: a longer number, a phone only where the rule knows its shape: `1` before a North American
        # number is its country code; one more digit on `+` and 10-15 digits is still one
        if side == "L":
            return "whole" if c == "1" and NANP_NO_CC.match(ex) else "unchanged"
        return "whole" if re.fullmatch(r"\+\d{10,14}", ex) else "unchanged"
    if tag == "<IPV4>" and c == "." and side == "L":  # a longer dotted run (`1.2.3.4.5`, host labels)
        return "unchanged"
    if tag == "<PHONE>" and c == "+" and side == "L" and ex.startswith("1-"):  # `+1-800-…`: a `+1` prefix
        return "whole"
    return "kept"


def _cases():
    for tag, exs in EXAMPLES.items():
        for ex in exs:
            for side in "LR":
                for c in PRINTABLE:
                    yield tag, ex, side, c


CASES = list(_cases())


def _same(s: str) -> str:
    return s


FULL_WIDTH = {i: i + 0xFEE0 for i in range(0x21, 0x7F)} | {0x20: 0x3000}  # NFKC folds these back
FORMS = {  # name: (how the boundary character is written, how the example is written)
    "ascii": (_same, _same),
    "full_width_example": (_same, lambda s: s.translate(FULL_WIDTH)),
    "full_width": (lambda s: s.translate(FULL_WIDTH), lambda s: s.translate(FULL_WIDTH)),
    "arabic_indic_digits": ((ar := lambda s: s.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))), ar),
    "devanagari_digits": ((dv := lambda s: s.translate(str.maketrans("0123456789", "०१२३४५६७८९"))), dv),
}


def _text(tag, ex, side, c, pre, post, fc=_same, fe=_same) -> str:
    return pre + (fc(c) + fe(ex) if side == "L" else fe(ex) + fc(c)) + post


def _want(tag, ex, side, c, pre, post, fc=_same, fe=_same) -> str:
    """The expected output; `expected` judges the ASCII case, the written forms only change the spelling."""
    how = expected(tag, ex, side, c)
    body = {"whole": tag, "unchanged": _text(tag, ex, side, c, "", "", fc, fe),
            "kept": fc(c) + tag if side == "L" else tag + fc(c)}[how]
    return pre + body + post


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("pre,post", [("x ", " y"), ("", "")], ids=["in_text", "alone"])
def test_every_printable_character_on_each_side(pre, post, form):
    fc, fe = FORMS[form]
    texts = [_text(*case, pre, post, fc, fe) for case in CASES]
    want = [_want(*case, pre, post, fc, fe) for case in CASES]
    out, _ = scrub(texts)
    wrong = [(t, o, w) for t, o, w in zip(texts, out.to_pylist(), want) if o != w]
    assert not wrong, f"{len(wrong)} of {len(CASES)} wrong, e.g. (text, got, want): {wrong[:8]}"


def test_a_boundary_character_on_both_sides():
    both = [(tag, ex, c) for tag, exs in EXAMPLES.items() for ex in exs for c in PRINTABLE
            if expected(tag, ex, "L", c) == expected(tag, ex, "R", c) == "kept"]
    out, counts = scrub([f"x {c}{ex}{c} y" for _, ex, c in both])
    assert out.to_pylist() == [f"x {c}{tag}{c} y" for tag, _, c in both]
    assert sum(map(sum, (col.to_pylist() for col in counts.columns))) == len(both)


WORD_PREFIXED = [  # the forms issue 25 found in the published shards, and their kin
    ("IPv6:2606:4700:4700::1111", "IPv6:<IPV6>"),
    ("host:2001:4860:4860::8888", "host:<IPV6>"),
    ("addr:2001:4860:4860::8888 and ip6.2606:4700:4700::1111", "addr:<IPV6> and ip6.<IPV6>"),
    ("at 2001:4860:4860::8888: unreachable", "at <IPV6>: unreachable"),
    ("Tel.415-555-2671", "Tel.<PHONE>"),
    ("Ph.(415) 555-2671, No.415.555.2671", "Ph.<PHONE>, No.<PHONE>"),
    ("415-555-2671/415-555-2672", "<PHONE>/<PHONE>"),
    ("415-555-2671/415-555-2672/415-555-2673/+44 20 7946 0958", "<PHONE>/<PHONE>/<PHONE>/<PHONE>"),
    ("(415) 555-2671/2", "<PHONE>/2"),
    ("https://x.com/2023/415-555-2671", "https://x.com/2023/<PHONE>"),  # what `/` lists cost (filters.md)
    # the forms the PII verification found in the published shards: full-width digits and separators
    ("４１５-５５５-２６７１", "<PHONE>"),
    ("２６０６:４７００:４７００::１１１１", "<IPV6>"),
    ("１-415-555-2671", "<PHONE>"),  # mixed: a full-width country code
    ("４１５－５５５－２６７１", "<PHONE>"),  # full-width hyphens U+FF0D
    ("電話：（４１５）　５５５－２６７１。ＩＰｖ６：２００１：４８６０：４８６０：：８８８８、８．８．８．８",
     "電話：<PHONE>。ＩＰｖ６：<IPV6>、<IPV4>"),
    ("ｊｏｈｎ．ｄｏｅ＠ｅｘａｍｐｌｅ．ｃｏｍ", "<EMAIL>"),
    ("هاتف ٤١٥-٥٥٥-٢٦٧١ و +٤٤ ٢٠ ٧٩٤٦ ٠٩٥٨", "هاتف <PHONE> و <PHONE>"),  # Arabic-Indic digits
    ("फ़ोन ४१५-५५५-२६७१", "फ़ोन <PHONE>"),  # Devanagari digits
    ("call\u00a0(415)\u00a0555-2671", "call\u00a0<PHONE>"),  # no-break spaces
    # glued to Han / Hiragana / Katakana, written without spaces between words
    ("電話４１５－５５５－２６７１です。サーバ８．８．８．８に、アドレス２６０６：４７００：４７００：：１１１１を",
     "電話<PHONE>です。サーバ<IPV4>に、アドレス<IPV6>を"),
    # markdown emphasis around them
    ("_415-555-2671_", "_<PHONE>_"),
    ("__8.8.8.8__ or *_2606:4700:4700::1111_*", "__<IPV4>__ or *_<IPV6>_*"),
]


@pytest.mark.parametrize("text,want", WORD_PREFIXED, ids=[w[0][:30] for w in WORD_PREFIXED])
def test_after_a_word_prefix_and_in_slash_lists(text, want):
    out, counts = scrub([text])
    assert out[0].as_py() == want
    assert sum(c[0].as_py() for c in counts.columns) == want.count("<")


KEPT = [
    "fd00:2345:6789::1",  # ULA: after a hex group a colon is inside the address, not before one
    "12:2606:4700::1 dead:2001:db8::1",  # likewise after digits or a hex word
    "https://example.com/415-555-2671 and path/415-555-2671",  # a slash after a letter: a URL path
    "3.415-555-2671 and 978-415-555-2671",  # a dot or dash after a digit: a longer number
    "5+415-555-2671",
    "tel_415-555-2671 ip_8.8.8.8 a__2606:4700:4700::1111 415-555-2671_x",  # `_` inside a word
    "３．４１５-５５５-２６７１ and ９７８－４１５－５５５－２６７１",  # full-width joiners after a digit
    "１２：２６０６：４７００：：１ ｖ１．２．３．４ １．２．３．４．５",
    "電話０３－１２３４－５６７８、〒１００－０００１、２０２３年１０月５日１２：３０：４５、ＩＳＢＮ９７８－４－１２３４５－６７８９－０",
]


@pytest.mark.parametrize("text", KEPT)
def test_joiners_inside_a_longer_token_stay_left_alone(text):
    assert scrub([text])[0][0].as_py() == text
