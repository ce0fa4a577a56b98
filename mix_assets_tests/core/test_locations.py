"""Locations: core/transport is the one module that knows the URL schemes (s3://, hf://, file://)."""

import ast
from pathlib import Path

import pytest

from mix_assets.core import transport as t

PACKAGE = Path(__file__).resolve().parents[2] / "mix_assets"
THE_ONE = PACKAGE / "core" / "transport.py"


def test_scheme_of_each_kind_of_location():
    assert t.scheme("s3://bucket/a/b") == t.S3
    assert t.scheme("hf://datasets/org/name@abc") == t.HUB
    assert t.scheme("/data/mix") == t.LOCAL and t.scheme("relative/mix") == t.LOCAL
    assert t.scheme("file:///data/mix") == t.LOCAL and t.local_path("file:///data/mix") == "/data/mix"
    with pytest.raises(ValueError, match="gs://b/x: unsupported location"):
        t.scheme("gs://b/x")


def test_hub_url_parts():
    assert t.split_hub_url("hf://datasets/org/name@abc/sub/dir") == t.HubUrl("org/name", "abc", "sub/dir")
    assert t.split_hub_url("hf://datasets/org/name") == t.HubUrl("org/name", None, "")
    for bad in ("hf://models/org/name@abc", "hf://datasets/org", "hf://datasets/org/name@"):
        with pytest.raises(ValueError, match="hf://"):
            t.split_hub_url(bad)


def test_s3_within_compares_bucket_and_key_prefix():
    assert t.s3_url_within("s3://b/mix/pub", "s3://b/mix")
    assert t.s3_url_within("s3://b/mix", "s3://b/mix/") and t.s3_url_within("s3://b/x", "s3://b")
    assert not t.s3_url_within("s3://b/mixer", "s3://b/mix")
    assert not t.s3_url_within("s3://other/mix/pub", "s3://b/mix")


def scheme_tests(source: str) -> list[tuple[int, str]]:
    """Places that decide a location's kind from its text: a string holding '://' given to
    startswith/removeprefix/partition/split/index/find or a regular expression's match/search/fullmatch,
    tested with `in`, or compared with ==/!= (`url[:5] == "s3://"`); or a parsed URL's `.scheme`
    compared with a string (`urlparse(url).scheme == "s3"`)."""
    found = []

    def texts(nodes):
        consts = [n for n in nodes if isinstance(n, ast.Constant)]
        consts += [e for n in nodes if isinstance(n, (ast.Tuple, ast.List, ast.Set)) for e in n.elts
                   if isinstance(e, ast.Constant)]
        return [c.value for c in consts if isinstance(c.value, str)]

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            sides = [node.left, *node.comparators]
            if any("://" in v for v in texts(sides)):
                found.append((node.lineno, "== '...://'"))
                continue
        if isinstance(node, ast.Compare) and any(isinstance(a, ast.Attribute) and a.attr == "scheme"
                                                 for a in (node.left, *node.comparators)) and texts(
                [node.left, *node.comparators]):
            found.append((node.lineno, ".scheme compared with a string"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "startswith", "removeprefix", "partition", "split", "index", "find", "match", "search",
                "fullmatch"):
            args = [a for a in node.args if isinstance(a, ast.Constant)]
            args += [e for a in node.args if isinstance(a, ast.Tuple) for e in a.elts if isinstance(e, ast.Constant)]
            args += [v for a in node.args if isinstance(a, ast.JoinedStr) for v in a.values
                     if isinstance(v, ast.Constant)]
            if any(isinstance(a.value, str) and "://" in a.value for a in args):
                found.append((node.lineno, f".{node.func.attr}(...)"))
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str) and "://" in node.left.value:
                found.append((node.lineno, f"{node.left.value!r} in ..."))
    return found


def test_the_checker_sees_each_way_of_testing_a_scheme():
    src = ('a = u.startswith("s3://")\nb = u.removeprefix("hf://")\nc = "://" in u\n'
           'd = u.startswith(("s3://", "gs://"))\ne = "x" in u\nf = u.startswith("s3")\n'
           'g = u[:5] == "s3://"\nh = re.match(r"hf://", u)\ni = urlparse(u).scheme in ("s3", "gs")\n'
           'j = u == v\nk = transport.scheme(u) == transport.S3\n')
    assert [line for line, _ in scheme_tests(src)] == [1, 2, 3, 4, 7, 8, 9]


# (file, what): why it is not a storage location
ALLOWED = {("core/engine.py", ".partition(...)"): "a Ray cluster address (ray://host:port), not a storage location"}


def test_only_core_transport_knows_url_schemes():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == THE_ONE:
            continue
        for line, what in scheme_tests(path.read_text()):
            if (str(path.relative_to(PACKAGE)), what) in ALLOWED:
                continue
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert not offenders, ("these modules decide a location's kind themselves; use core/transport "
                           "(scheme, is_url, local_path, split_s3_url, split_hub_url, s3_url_within):\n"
                           + "\n".join(offenders))
