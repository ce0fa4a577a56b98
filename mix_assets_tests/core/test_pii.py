import ipaddress
import json
import re
import unicodedata

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from mix_assets.core import pii
from mix_assets.core.pii import RULES, SCRUB_RULES_VERSION, scrub, scrub_manifest


def one(text: str) -> tuple[str, dict]:
    out, counts = scrub([text])
    return out[0].as_py(), {k: v for k, v in counts.to_pylist()[0].items() if v}


POSITIVES = [
    ("Write to john.doe@example.com.", "Write to <EMAIL>.", {"email": 1}),
    ("mail: Ana-María.López+news@correo.ejemplo.es, thanks", "mail: <EMAIL>, thanks", {"email": 1}),
    ("<a href='mailto:x_y@sub.example.org'>", "<a href='mailto:<EMAIL>'>", {"email": 1}),
    ("josé@münchen.de", "<EMAIL>", {"email": 1}),
    ("server 8.8.8.8 and 1.1.1.1 8.8.4.4.", "server <IPV4> and <IPV4> <IPV4>.", {"ipv4": 3}),
    ("http://93.184.216.34:8080/x", "http://<IPV4>:8080/x", {"ipv4": 1}),
    ("(8.8.8.8) ip=8.8.8.8;", "(<IPV4>) ip=<IPV4>;", {"ipv4": 2}),
    ("version 1.2.3.4 ships", "version <IPV4> ships", {"ipv4": 1}),  # a public address in form: redacted
    ("2001:4860:4860::8888 and 2606:4700:4700::1111.", "<IPV6> and <IPV6>.", {"ipv6": 2}),
    ("[2a00:1450:4001:81b:0:0:0:200e]:443", "[<IPV6>]:443", {"ipv6": 1}),
    ("Call (415) 555-2671 or 415-555-2671 or 415.555.2671.", "Call <PHONE> or <PHONE> or <PHONE>.", {"phone": 3}),
    ("toll free 1-800-555-2671", "toll free <PHONE>", {"phone": 1}),
    ("+1 (415) 555-2671", "<PHONE>", {"phone": 1}),
    ("UK +44 20 7946 0958, FR +33 1 23 45 67 89, DE +49 30 1234567, +14155552671",
     "UK <PHONE>, FR <PHONE>, DE <PHONE>, <PHONE>", {"phone": 4}),
    ("Jo <jo@example.com>, 8.8.8.8, +44 20 7946 0958", "Jo <<EMAIL>>, <IPV4>, <PHONE>",
     {"email": 1, "ipv4": 1, "phone": 1}),
]


@pytest.mark.parametrize("text,want,counts", POSITIVES, ids=[p[0][:30] for p in POSITIVES])
def test_redacts(text, want, counts):
    assert one(text) == (want, counts)


NEAR_MISSES = {
    "email": ["root@localhost", "@username said", "x@y.z", "a [at] b [dot] com", "user @ example.com",
              "@property def f(self):"],
    "ipv4": ["10.0.0.1 192.168.1.1 127.0.0.1 255.255.255.0 0.0.0.0 172.16.5.4 169.254.1.1 100.64.0.1",
             "docs ranges 192.0.2.1 203.0.113.5 198.51.100.7, multicast 224.0.0.1",
             "v1.2.3.4, 1.2.3.4.5, 01.02.03.04, 2.7.15, Chrome 120.0.6099.109, 12.10.2023, 3.141592653"],
    "ipv6": ["12:30:45 2023-10-05T12:30:45Z", "timecode 01:02:03:04", "EXIF 2023:10:05 12:30:45",
             "std::vector<int> a::b", "MAC 00:1a:2b:3c:4d:5e", "dead::beef", "John 3:16", "fe80::1 ::1 fc00::1",
             "ratio 2000:1", "2023:10:05:11:22:33"],
    "phone": ["ISBN 978-3-16-148410-0, ISBN 0-306-40615-2, 978-1-234-56789-7, ISBN-10 0306406152",
              "on 2023-10-05 or 10/05/2023 or 05.10.2023 at 12:30",
              "$1,234.56 and 1 234 567 and €1.234.567,89 and zip 94105-1234 and 123-45-6789",
              "+5 points, +1.5%, +20 200, +1234567", "123-456-7890", "5551234567", "1990-2000 and 2001-2024",
              "https://example.com/415-555-2671", "ext. 415-555-2671-22", "doi:10.1000/182",
              "lat 37.7749, -122.4194"],
}


@pytest.mark.parametrize("rule,text", [(r, t) for r, ts in NEAR_MISSES.items() for t in ts])
def test_leaves_near_misses(rule, text):
    assert one(text) == (text, {})


WRITTEN = {"full_width": {i: i + 0xFEE0 for i in range(0x21, 0x7F)} | {0x20: 0x3000},  # NFKC folds these back
           "arabic_indic_digits": str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")}
PLACEHOLDER = re.compile("(<EMAIL>|<IPV6>|<IPV4>|<PHONE>)")


def written(text: str, form: str) -> str:
    """`text` in another form, its placeholders as they are."""
    return "".join(p if PLACEHOLDER.fullmatch(p) else p.translate(WRITTEN[form]) for p in PLACEHOLDER.split(text))


@pytest.mark.parametrize("form", WRITTEN)
def test_positives_and_near_misses_in_other_forms_come_out_the_same(form):
    texts = [written(t, form) for t, _, _ in POSITIVES] + [written(t, form) for ts in NEAR_MISSES.values() for t in ts]
    want = [(written(w, form), c) for _, w, c in POSITIVES] + [(t, {}) for t in texts[len(POSITIVES):]]
    out, counts = scrub(texts)
    got = [(o, {k: v for k, v in row.items() if v}) for o, row in zip(out.to_pylist(), counts.to_pylist())]
    assert [(t, g) for t, g, w in zip(texts, got, want) if g != w] == []


@pytest.mark.parametrize("digits", ["0123456789", "０１２３４５６７８９", "٠١٢٣٤٥٦٧٨٩"])
def test_ipv4_rule_is_is_global_except_multicast(digits):
    cands = [f"{a}.{b}.{c}.7" for a in range(256) for b in range(0, 256, 3) for c in (0, 2, 100, 113)]
    cands += [f"{a}.{b}.{c}.7" for a in (100, 169, 172, 192, 198, 203) for b in range(256) for c in (0, 2, 100, 113)]
    written = str.maketrans("0123456789", digits)
    hit = pc.match_substring_regex(pa.array([f"x {ip.translate(written)} y" for ip in cands]), pii.IPV4).to_pylist()
    for ip, h in zip(cands, hit):
        g = ipaddress.ip_address(ip)
        assert h == (g.is_global and not g.is_multicast), ip


def test_widening_adds_only_what_nfkc_folds_to_the_ascii_and_other_scripts_digits():
    wide = pii._widen(r"(^|[^\pL.])\d-[a-c] ?\+")
    assert wide == ("(^|[^\\pL.．])[0-9０-９٠-٩۰-۹०-९][\\-－][a-cａ-ｃ][ \u00a0\u2007\u202f\u3000]?[+＋]")
    for ch in [chr(i) for i in range(0x21, 0x7F)] + [" "]:
        forms = pii._forms(ch, ch)
        assert forms[0] == (ch, ch)
        for lo, _ in forms[1:]:
            folded = unicodedata.normalize("NFKC", lo)
            assert folded == ch or (ch.isdigit() and unicodedata.digit(lo) == int(ch)), (ch, lo)
    with pytest.raises(ValueError, match=r"escape \\w at 0 is not supported"):
        pii._widen(r"\w+")
    with pytest.raises(ValueError, match="mixes digits"):
        pii._widen("[+-9]")


def test_vectorised_batch_counts_per_document_and_keeps_other_text():
    texts = pa.chunked_array([["a@b.co c@d.org", "clean text"], ["", "8.8.8.8\n9.9.9.9 <EMAIL> e@f.io"]])
    out, counts = scrub(texts)
    assert out.to_pylist() == ["<EMAIL> <EMAIL>", "clean text", "", "<IPV4>\n<IPV4> <EMAIL> <EMAIL>"]
    assert counts.column_names == ["email", "ipv6", "ipv4", "phone"]
    assert counts.column("email").to_pylist() == [2, 0, 0, 1]  # a placeholder already there is not counted
    assert counts.column("ipv4").to_pylist() == [0, 0, 0, 2]
    assert counts.schema.field("email").type == pa.int32()


def test_adjacent_matches_sharing_a_boundary_are_all_redacted():
    out, counts = scrub([" ".join(["8.8.8.8"] * 7), ",".join(["415-555-2671"] * 5)])
    assert out.to_pylist() == [" ".join(["<IPV4>"] * 7), ",".join(["<PHONE>"] * 5)]
    assert counts.column("ipv4").to_pylist() == [7, 0] and counts.column("phone").to_pylist() == [0, 5]


def test_scrub_is_idempotent_and_placeholders_do_not_match():
    texts = [p[0] for p in POSITIVES]
    once, _ = scrub(texts)
    twice, counts = scrub(once)
    assert twice.equals(once)
    assert sum(sum(c.to_pylist()) for c in counts.columns) == 0


def test_bad_input_names_the_row():
    with pytest.raises(ValueError, match="scrub: text at row 2 is null"):
        scrub(["a", "b", None])
    with pytest.raises(ValueError, match="no rules"):
        scrub(["a"], rules=())


def test_scrub_manifest_per_source():
    texts = ["a@b.co and 8.8.8.8", "nothing here", "call 415-555-2671", "x@y.io, z@w.io"]
    _, counts = scrub(texts)
    m = scrub_manifest(counts, ["web", "web", "books", "web"], revision="r1")
    assert m["rules_version"] == SCRUB_RULES_VERSION and m["revision"] == "r1"
    assert [r["name"] for r in m["rules"]] == ["email", "ipv6", "ipv4", "phone"]
    assert all(len(r["pattern_sha256"]) == 64 for r in m["rules"])
    assert m["sources"] == {
        "books": {"docs": 1, "scrubbed_docs": 1, "redactions": {"email": 0, "ipv6": 0, "ipv4": 0, "phone": 1}},
        "web": {"docs": 3, "scrubbed_docs": 2, "redactions": {"email": 3, "ipv6": 0, "ipv4": 1, "phone": 0}},
    }
    assert json.loads(json.dumps(m)) == m
    assert scrub_manifest(counts, pa.array(["web", "web", "books", "web"]), revision="r1") == m


def test_manifest_fingerprints_change_with_any_pattern():
    _, counts = scrub(["a@b.co"])
    base = scrub_manifest(counts, ["s"])
    changed = (pii.PiiRule("email", "<EMAIL>", RULES[0].pattern.replace(r"\pL\pL+", r"\pL+"), ""),) + RULES[1:]
    other = scrub_manifest(counts, ["s"], rules=changed)
    assert other["rules_sha256"] != base["rules_sha256"]
    assert other["rules"][0]["pattern_sha256"] != base["rules"][0]["pattern_sha256"]


def test_scrub_manifest_checks_its_inputs():
    _, counts = scrub(["a", "b"])
    with pytest.raises(ValueError, match="1 sources for 2 rows"):
        scrub_manifest(counts, ["s"])
    with pytest.raises(ValueError, match=r"no column for rule\(s\) \['phone'\]"):
        scrub_manifest(counts.drop(["phone"]), ["s", "s"])
