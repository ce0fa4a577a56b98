"""Adding a filter is one module and one registry line: a toy filter (toy_filter.py, in this test package)
registered by the `toy` fixture runs in the cascade at its place, has its `filters.toy` section in the YAML,
its expectations, its measured figures, and its rows in document_filters' kill-rate and brevity tables and
samples. Nothing else names it, so a per-filter list left anywhere in the cascade, the config section,
decisions or the metadata drops it and fails here; a last test reads the stage's modules for such lists."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from mix_assets.config import MixConfigError, load_spec
from mix_assets.core import engine as eng
from mix_assets.stages.filters import decisions, cascade, registry
from mix_assets.stages.filters import metadata as filters_md
from mix_assets.stages.filters.rules.gopher_quality import GopherQualityFilter
from mix_assets_tests.stages.filters import toy_filter
from mix_assets_tests.stages.filters.test_decisions import write_source
from mix_assets_tests.stages.filters.test_filters import GOOD
from mix_assets_tests.test_audit_published_demo import demo_config

STOP = set(GopherQualityFilter().stop_words)
SHOUTING = " ".join(w if w in STOP else w.upper() for w in GOOD.split(" "))  # fails toy:shouting alone
FEW = "Two words."  # fails toy:few_words (and a rule of a filter before it)


@pytest.fixture
def toy():
    registry.register(toy_filter.FILTER, after="gopher_quality")  # the one registry line
    yield toy_filter.FILTER
    registry.unregister("toy")


def _spec(tmp_path, filters_edit: dict, source_edit: dict | None = None):
    cfg = demo_config(tmp_path)
    data = yaml.safe_load(cfg.read_text())
    data["filters"].update(filters_edit)
    if source_edit is not None:
        data["sources"][0]["filters"] = source_edit
    cfg.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(cfg)


def test_the_config_takes_the_toy_section_from_yaml(tmp_path, toy):
    spec = _spec(tmp_path, {"toy": {"max_upper_share": 0.3}, "expect": {"toy": {"max_kill_rate": 0.9}}})
    assert spec.filters.toy == toy_filter.ToyFilter(max_upper_share=0.3)
    assert spec.filters.active() == ["gopher_repetition", "gopher_quality", "toy", "c4", "fineweb", "language"]
    assert spec.filters.max_kill_rate("toy") == 0.9
    assert '"toy":{"enabled":true,"max_upper_share":0.3,"min_words":3}' in spec.canonical_json()
    assert spec.filters.filter_config().toy == toy_filter.ToyFilter(max_upper_share=0.3)
    # a source's override merges over it, as over any section
    first = spec.sources[0].name
    off = _spec(tmp_path / "off", {"toy": {}}, {"toy": {"enabled": False}})
    assert "toy" not in off.filters_for(first).active() and "toy" in off.filters_for(off.sources[1].name).active()
    # its keys are checked like any section's, and a section no filter registered is still refused
    for bad, where in (({"toy": {"max_upper": 0.3}}, "filters.toy.max_upper"), ({"toys": {}}, "filters.toys: Extra inputs"),
                       ({"expect": {"toys": {}}}, "unknown filter(s) ['toys']")):
        with pytest.raises(MixConfigError, match=rf"{where}".replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            _spec(tmp_path / "bad", bad)


def test_without_its_registry_line_the_toy_section_is_refused(tmp_path):
    assert "toy" not in registry.names()
    with pytest.raises(MixConfigError, match="filters.toy: Extra inputs are not permitted"):
        _spec(tmp_path, {"toy": {}})
    with pytest.raises(TypeError, match="unknown filter"):
        cascade.FilterConfig(toy=toy_filter.ToyFilter())


def test_the_cascade_runs_it_in_its_place_and_measures_it(toy):
    lorem = SHOUTING + "\nLOREM IPSUM DOLOR SIT AMET."  # fails C4 too, which comes after the toy
    res = cascade.apply_filters([GOOD, SHOUTING, FEW, lorem])
    assert list(res.filter_reason) == ["sanity", "gopher_repetition", "gopher_quality", "toy", "c4", "fineweb"]
    assert list(res.seconds)[-3:] == ["toy", "c4", "fineweb"]
    assert res.reason == [None, "toy:shouting", "gopher_repetition:top_2_gram", "toy:shouting"]
    assert res.filter_reason["toy"] == [None, "toy:shouting", "toy:few_words", "toy:shouting"]
    assert res.filter_reason["c4"][3] == "c4:lorem_ipsum"
    assert res.stats["toy:shouting"] == {"failed_documents": 2, "first_failure_documents": 2}
    assert not cascade.apply_filters([SHOUTING], cascade.FilterConfig.only("c4")).failed.get("toy:shouting")
    measured = cascade.measure([SHOUTING, FEW])
    shout = measured[0]["toy:shouting"]
    assert shout.value > 0.5 and str(shout) == f"toy:shouting {shout.value:.2f} > 0.50"  # its figure, its threshold
    assert (measured[1]["toy:few_words"].value, measured[1]["toy:few_words"].threshold) == (2, 3)
    assert cascade.thresholds(cascade.FilterConfig())["toy:shouting"] == (">", 0.5)


def test_its_rejections_show_by_name_in_the_tables_and_samples(tmp_path, toy):
    spec = _spec(tmp_path, {"toy": {}, "guard": {"min_share": 0.05, "min_kept": 0.0, "length_buckets": [200],
                                                  "brevity_chars": 200, "brevity_warn": 0.5}})
    src = spec.sources[0].name
    fspec = spec.filters_for(src)
    params = decisions.filter_params(fspec)
    texts = [GOOD, SHOUTING, FEW, GOOD.replace("river", "stream"), GOOD + "\nlorem ipsum dolor sit amet."]
    path = write_source(tmp_path, src, texts)
    t = decisions.decide_chunk(decisions.FilterChunk(src, eng.row_ranges(path, 100)[0], params))
    assert t.column("reason").to_pylist()[1] == "toy:shouting"
    assert "toy:few_words" in t.column("rules").to_pylist()[2]
    guard = decisions.guard_for(spec)
    assert "toy" in guard.active[src]
    s = decisions.summarise({src: t}, guard)
    kills = {k["filter"]: k for k in s.kills}
    assert list(kills) == fspec.active() and kills["toy"]["first_failure_docs"] == 1
    assert {b["rule"] for b in s.brevity} >= {"toy:few_words"}  # a length rule: the brevity WARN watches it
    picked = decisions.pick_samples({src: t}, 3, set())
    assert list(dict.fromkeys(f for _, f, _, _ in picked)) == ["gopher_repetition", "toy", "c4", "kept"]  # cascade order
    why = decisions.explain(picked, dict(zip(t.column("doc_id").to_pylist(), texts)), {src: params})
    shout = str(cascade.measure([SHOUTING])[0]["toy:shouting"])
    assert why[f"{src}-00001"] == shout

    class Storage:
        def uri(self, key):
            return key

    rows, withheld = filters_md.sample_rows(picked, {f"{src}-{i:05d}": x for i, x in enumerate(texts)},
                                            pa.array([], pa.uint64()).to_numpy(), 8, why)
    meta = filters_md.document_filters(Storage(), s, (rows, withheld), [])
    assert meta["rejected_docs/toy"] == 1
    assert "toy" in [r.data["filter"] for r in meta["kill_rates"].records]
    assert f"`{shout}`" in meta["rejects"].value  # the sample's reason with its figure
    assert "toy:few_words" in filters_md.brevity_kept(s)["brevity_md"].value


# -- no per-filter list left in the stage ------------------------------------------------------------------
STAGE = Path(cascade.__file__).parent
ASKED = ("cascade.py", "kernels.py", "rule.py", "decisions.py", "metadata.py", "config.py", "assets.py")


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module's code (docstrings and comments left out)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_no_module_of_the_stage_names_a_filter_but_its_own_and_the_registry():
    names = registry.names()
    found = [f"{m}:{line}: {s!r}" for m in ASKED for line, s in _code_strings(STAGE / m)
             if s in names or s.split(":")[0] in names]
    assert found == [], "per-filter names outside rules/<name>.py and registry.py:\n" + "\n".join(found)
