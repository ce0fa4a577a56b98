import pytest

from mix_assets.config import REPO_ROOT, MixConfigError, load_spec

from mix_assets_tests.conftest import minimal_config, source, write_config


@pytest.mark.parametrize("name", ["demo.yaml", "shared-sample.yaml", "example-hub.yaml"])
def test_shipped_configs_validate(name):
    spec = load_spec(REPO_ROOT / "configs" / name)
    assert abs(sum(s.share for s in spec.sources) - 1) < 1e-9
    assert all(len(s.rationale) >= 20 for s in spec.sources)


def test_example_hub_pins_every_hub_dataset():
    spec = load_spec(REPO_ROOT / "configs" / "example-hub.yaml")
    assert {s.loader.kind for s in spec.sources} == {"hub"}
    assert all(s.loader.revision for s in spec.sources)
    assert 1.1 <= spec.headroom <= 1.25


def test_mix_config_env_and_storage_override(monkeypatch, tmp_path):
    cfg = write_config(tmp_path, minimal_config(sources=[source("a", {"kind": "jsonl", "paths": ["a.jsonl"]})]))
    monkeypatch.setenv("MIX_CONFIG", str(cfg))
    monkeypatch.setenv("MIX_STORAGE_ROOT", "s3://bucket/prefix")
    spec = load_spec()
    assert spec.name == "t_mix" and spec.storage.root == "s3://bucket/prefix"
    # relative paths resolve against the config file's folder, not the working directory
    assert spec.resolve("a.jsonl") == str(tmp_path / "a.jsonl")


def _error(tmp_path, data) -> str:
    cfg = write_config(tmp_path, data)
    with pytest.raises(MixConfigError) as e:
        load_spec(cfg)
    msg = str(e.value)
    assert str(cfg) in msg
    return msg


def test_missing_field_names_file_and_field(tmp_path):
    data = minimal_config(sources=[source("a", {"kind": "jsonl", "paths": ["a.jsonl"]})])
    del data["target_tokens"]
    assert "target_tokens: Field required" in _error(tmp_path, data)


def test_wrong_type_names_field_and_expectation(tmp_path):
    data = minimal_config(sources=[source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}, share="lots")])
    msg = _error(tmp_path, data)
    assert "sources.0.share" in msg and "valid number" in msg and "'lots'" in msg


def test_unknown_loader_kind(tmp_path):
    data = minimal_config(sources=[source("a", {"kind": "ftp", "paths": ["a"]})])
    msg = _error(tmp_path, data)
    assert "sources.0.loader" in msg and "'hub', 'jsonl', 'parquet', 'text'" in msg


def test_shares_must_sum_to_one(tmp_path):
    data = minimal_config(sources=[
        source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}, share=0.5),
        source("b", {"kind": "jsonl", "paths": ["b.jsonl"]}, share=0.3),
    ])
    assert "shares must sum to 1, they sum to 0.800000" in _error(tmp_path, data)


def test_headroom_range_and_unknown_keys(tmp_path):
    data = minimal_config(headroom=2.0, sources=[source("a", {"kind": "jsonl", "paths": ["a"]})], colour="red")
    msg = _error(tmp_path, data)
    assert "headroom: Input should be less than or equal to 1.25" in msg
    assert "colour: Extra inputs are not permitted" in msg


def test_hub_source_needs_a_pinned_revision(tmp_path):
    data = minimal_config(sources=[source("a", {"kind": "hub", "repo_id": "org/x", "revision": "main"})])
    assert "not a moving branch" in _error(tmp_path, data)


def test_text_or_template_exactly_one(tmp_path):
    data = minimal_config(sources=[source("a", {"kind": "jsonl", "paths": ["a"]}, template="{q}")])
    assert "exactly one of text_field or template" in _error(tmp_path, data)


def test_eval_task_refuses_test_split_in_config(tmp_path):
    data = minimal_config(
        sources=[source("a", {"kind": "jsonl", "paths": ["a"]})],
        audit={"tasks": [{"name": "t", "dataset": {"kind": "local", "path": "evals/t"},
                          "scored_split": "test", "audit_splits": ["Test"], "fields": ["q"]}]},
    )
    assert "test splits are never audited" in _error(tmp_path, data)


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(MixConfigError, match="not valid YAML"):
        load_spec(bad)
    with pytest.raises(MixConfigError, match="not found"):
        load_spec(tmp_path / "nope.yaml")
    top = tmp_path / "list.yaml"
    top.write_text("- a\n- b\n")
    with pytest.raises(MixConfigError, match="expected a mapping"):
        load_spec(top)


def test_duplicate_yaml_key_is_refused_with_key_and_line(tmp_path):
    cfg = tmp_path / "dup.yaml"
    cfg.write_text(
        "name: t_mix\ntarget_tokens: 1000\nsources:\n"
        "  - name: a\n    loader: {kind: jsonl, paths: [a.jsonl]}\n    text_field: text\n"
        "    license: test\n    rationale: A test source whose property is that it is small.\n"
        "    share: 0.5\n    share: 1.0\n"
    )
    with pytest.raises(MixConfigError, match=rf"{cfg}: line 10: key 'share' is given twice \(first on line 9\)"):
        load_spec(cfg)


def test_yaml_merge_keys_still_override(tmp_path):
    # a merge key (<<) is an explicit override, not a repeated key
    cfg = write_config(tmp_path, minimal_config(sources=[source("a", {"kind": "jsonl", "paths": ["a.jsonl"]})]))
    cfg.write_text(cfg.read_text() + "x-defaults: &d {seed: 1, name: other}\n")
    text = cfg.read_text().replace("seed: 3\n", "") + "<<: *d\n"
    cfg.write_text(text)
    spec_data = __import__("yaml").safe_load(text)
    assert spec_data["seed"] == 1 and spec_data["name"] == "t_mix"
    with pytest.raises(MixConfigError, match="x-defaults: Extra inputs"):  # merged, not refused as a duplicate
        load_spec(cfg)


def _one_source(**kw) -> dict:
    return minimal_config(sources=[source("a", {"kind": "jsonl", "paths": ["a.jsonl"]}, **kw)])


def test_absurd_sizes_are_refused_at_load(tmp_path):
    msg = _error(tmp_path, {**_one_source(), "target_tokens": 10**30})
    assert "target_tokens: Input should be less than or equal to 1000000000000000" in msg
    msg = _error(tmp_path, {**_one_source(), "target_tokens": 10**16})
    assert "target_tokens: Input should be less than or equal to" in msg
    msg = _error(tmp_path, {**_one_source(), "target_tokens": 10**12, "packing": {"seq_len": 10**9}})
    assert "packing.seq_len: Input should be less than or equal to 2097152" in msg
    msg = _error(tmp_path, {**_one_source(), "packing": {"shard_tokens": 10**15}})
    assert "packing.shard_tokens: Input should be less than or equal to" in msg
    msg = _error(tmp_path, {**_one_source(), "target_tokens": 1000, "packing": {"seq_len": 4096}})
    assert "a sample of 4096 tokens is longer than the whole mix (target_tokens 1000)" in msg


@pytest.mark.parametrize("template,why", [
    ("{text", "not a valid template: expected '}' before end of string"),
    ("text}", "not a valid template: Single '}' encountered"),
    ("{text.__class__}", "plain field names like {question}; '{text.__class__}' reads an attribute or an index"),
    ("{text[0]}", "'{text[0]}' reads an attribute or an index"),
    ("{0}", "'{0}' is positional"),
    ("{}", "'{}' is positional"),
    ("{text!r}", "'{text!r}' has a conversion or format spec"),
    ("{text:>{width}}", "'{text:>{width}}' has a conversion or format spec"),
    ("no fields at all", "names no field"),
])
def test_template_is_parsed_at_load_plain_fields_only(tmp_path, template, why):
    msg = _error(tmp_path, _one_source(text_field=None, template=template))
    assert "sources.0.template" in msg and why in msg


def test_template_fields_from_the_formatter(tmp_path):
    spec = load_spec(write_config(tmp_path, _one_source(text_field=None, template="{{lit}} {q-id}: {q}\n{a} {q}")))
    assert spec.sources[0].fields == ["a", "q", "q-id"]


def test_separator_of_a_trained_tokenizer_must_be_a_special_token(tmp_path):
    data = {**_one_source(), "tokenizer": {"kind": "train", "special_tokens": ["<|endoftext|>"]},
            "packing": {"separator": "<|eos|>"}}
    assert "packing.separator '<|eos|>' is not one of tokenizer.special_tokens" in _error(tmp_path, data)


def test_loader_encodings_and_doc_length_bounds_checked_at_load(tmp_path):
    data = minimal_config(sources=[source("a", {"kind": "text", "paths": ["t"], "encoding": "utf-9"})])
    assert "unknown encoding 'utf-9'" in _error(tmp_path, data)
    data = minimal_config(sources=[source("a", {"kind": "text", "paths": ["t"], "fallback_encoding": "nope"})])
    assert "unknown encoding 'nope'" in _error(tmp_path, data)
    assert "min_doc_chars (50) exceeds max_doc_chars (10)" in _error(tmp_path, _one_source(min_doc_chars=50,
                                                                                           max_doc_chars=10))


def test_language_id_reads_the_measured_head_by_default():
    from mix_assets.stages.filters.config import LanguageSpec
    from mix_assets.stages.filters import langid

    assert LanguageSpec().max_chars == langid.DEFAULT_MAX_CHARS


def test_keep_share_scales_the_raw_sample_and_its_minimum_per_source(tmp_path):
    """A cascade that drops half of a source cannot be covered by headroom (<= 1.25): raw samples
    budget x headroom / keep_share, and the override of one source leaves the other's sample alone."""
    jl = {"kind": "jsonl", "paths": ["x.jsonl"]}
    cfg = minimal_config(target_tokens=100_000, headroom=1.25, sources=[
        source("a", jl, 0.5), source("b", jl, 0.5, filters={"keep_share": 0.5})])
    plain = load_spec(write_config(tmp_path, {**cfg, "sources": [source("a", jl, 0.5), source("b", jl, 0.5)]}))
    assert plain.keep_share("a") == plain.keep_share("b") == 1.0  # no filters run: nothing to keep
    assert "keep_share" not in plain.canonical_json()
    spec = load_spec(write_config(tmp_path, {**cfg, "filters": {"gopher_quality": {}, "keep_share": 0.8}}))
    assert (spec.keep_share("a"), spec.keep_share("b")) == (0.8, 0.5)
    base = 50_000 * 1.25 / 0.98
    assert spec.raw_budget("a") == round(base / 0.8) and spec.raw_budget("b") == round(base / 0.5)
    assert spec.raw_minimum_tokens("b") == -(-spec.minimum_tokens("b") * 2 // 1)
    # the default stays out of the published config, so configs written before it keep their bytes
    spec1 = load_spec(write_config(tmp_path, {**cfg, "sources": [source("a", jl, 0.5), source("b", jl, 0.5)],
                                              "filters": {"gopher_quality": {}}}))
    assert "keep_share" not in spec1.canonical_json() and spec1.raw_budget("a") == plain.raw_budget("a")
    for bad in (0, 1.5):
        assert "keep_share" in _error(tmp_path, {**cfg, "filters": {"gopher_quality": {}, "keep_share": bad}})


def test_engine_ints_are_strict_and_num_cpus_bounded(tmp_path):
    msg = _error(tmp_path, {**_one_source(), "engine": {"num_cpus": True}})
    assert "engine.num_cpus: Input should be a valid integer (got True)" in msg
    msg = _error(tmp_path, {**_one_source(), "engine": {"chunk_rows": True, "max_retries": False}})
    assert "engine.chunk_rows: Input should be a valid integer (got True)" in msg and "engine.max_retries" in msg
    msg = _error(tmp_path, {**_one_source(), "engine": {"num_cpus": 20000}})
    assert "engine.num_cpus: Input should be less than or equal to 1024 (got 20000)" in msg
    msg = _error(tmp_path, {**_one_source(), "engine": {"kind": "ray", "connect_timeout_s": True}})
    assert "engine.connect_timeout_s: Input should be a valid number (got True)" in msg
    spec = load_spec(write_config(tmp_path, {**_one_source(), "engine": {"num_cpus": 1024, "connect_timeout_s": 2}}))
    assert (spec.engine.num_cpus, spec.engine.connect_timeout_s) == (1024, 2.0)
    assert load_spec(write_config(tmp_path, _one_source())).engine.connect_timeout_s == 30.0


def test_storage_root_and_publish_url_that_would_hold_other_things_are_refused_at_load(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / "mixes").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    cases = [
        ({"storage": {"root": "/"}}, "storage.root '/' is the filesystem root"),
        ({"storage": {"root": "~"}}, f"storage.root '~' (= {home}) is the home directory"),
        ({"storage": {"root": str(home.parent)}}, f"is a parent of the home directory {home}"),
        ({"storage": {"root": str(REPO_ROOT)}}, f"storage.root '{REPO_ROOT}' is the project checkout"),
        ({"storage": {"root": str(REPO_ROOT.parent)}}, f"is a parent of the project checkout {REPO_ROOT}"),
        ({"publish": {"url": "/"}}, "publish.url '/' is the filesystem root"),
        ({"publish": {"url": "~/"}}, f"publish.url '~/' (= {home}) is the home directory"),
        ({"storage": {"root": "st"}, "publish": {"url": "st/published"}},
         f"publish.url 'st/published' (= {tmp_path / 'st' / 'published'}) is inside storage.root 'st' "
         f"(= {tmp_path / 'st'})"),
        ({"storage": {"root": "~/mixes/st"}, "publish": {"url": "~/mixes/st"}}, "is inside storage.root '~/mixes/st'"),
        ({"storage": {"root": "s3://b/mix"}, "publish": {"url": "s3://b/mix/published"}},
         "publish.url 's3://b/mix/published' is inside storage.root 's3://b/mix'"),
    ]
    for over, want in cases:
        msg = _error(tmp_path, {**_one_source(), **over})
        assert want in msg, (over, msg)
    # `~` is expanded: a folder under the home directory is fine, and so are siblings
    spec = load_spec(write_config(tmp_path, {**_one_source(), "storage": {"root": "~/mixes/st"},
                                             "publish": {"url": "~/mixes/published"}}))
    assert spec.resolve(spec.storage.root) == str(home / "mixes" / "st")
    for root, url in (("s3://b/mix", "s3://b/mix-published"), ("s3://b/mix", str(tmp_path / "pub"))):
        load_spec(write_config(tmp_path, {**_one_source(), "storage": {"root": root}, "publish": {"url": url}}))


def test_a_storage_root_override_is_checked_like_the_files_own(tmp_path, monkeypatch):
    cfg = write_config(tmp_path, {**_one_source(), "publish": {"url": str(tmp_path / "out" / "published")}})
    monkeypatch.setenv("MIX_STORAGE_ROOT", str(tmp_path / "out"))
    with pytest.raises(MixConfigError, match=r"is inside storage.root .* \(storage.root from MIX_STORAGE_ROOT\)"):
        load_spec(cfg)
    monkeypatch.setenv("MIX_STORAGE_ROOT", "/")
    with pytest.raises(MixConfigError, match="storage.root '/' is the filesystem root"):
        load_spec(cfg)
