"""tokenizer -> token_shards -> manifest through Dagster (from a stand-in upstream), with their gates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from mix_assets.stages.manifest.assets import MANIFEST_SELF_CONSISTENT, SHARDS_AUDIT_CLEAN, build_manifest_assets
from mix_assets.stages.split.assets import VAL_DISJOINT_FROM_TRAIN, VAL_SHARE_IN_TOLERANCE, build_split_assets
from mix_assets.stages.tokens.assets import (
    DROPPED_TAIL_AND_SEAM_RECORDED,
    NO_EMPTY_SHARD,
    SEPARATOR_IN_VOCAB,
    TOKEN_IDS_MATCH_REFERENCE,
    build_tokens_assets,
)
from mix_assets.core import layout
from mix_assets.stages.tokens import samples as samples_lib
from mix_assets.resources import MixResource
from mix_assets_tests.support.tokens_stage import checks, run, setup


def test_stage_materialises_with_every_gate_green(tmp_path):
    spec, assets, res = setup(tmp_path)
    result = run(assets, res)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert checks(result) == {VAL_DISJOINT_FROM_TRAIN: True, VAL_SHARE_IN_TOLERANCE: True, SEPARATOR_IN_VOCAB: True,
                              NO_EMPTY_SHARD: True, DROPPED_TAIL_AND_SEAM_RECORDED: True, MANIFEST_SELF_CONSISTENT: True,
                              SHARDS_AUDIT_CLEAN: True, TOKEN_IDS_MATCH_REFERENCE: True}
    meta = result.asset_materializations_for_node("manifest")[0].metadata
    manifest = json.loads((tmp_path / "storage" / layout.MANIFEST).read_text())
    assert meta["fingerprint"].value == manifest["fingerprint"]
    assert meta["train_tokens"].value == manifest["totals"]["train_tokens"] > 0
    shards = result.asset_materializations_for_node("token_shards")[0].metadata
    assert shards["dtype"].value == "uint16" and 0 <= shards["train_seam_share"].value <= 1
    assert shards["doc_index_bytes"].value > 0  # packing.doc_index defaults to true
    # the fast encoder built them (the stand-in's trained byte-level BPE) and the check compared them with HF
    assert shards["encoder_backend"].value == "tiktoken", shards["encoder_fallback_reason"].value
    ev = next(e for e in result.get_asset_check_evaluations() if e.check_name == TOKEN_IDS_MATCH_REFERENCE)
    assert ev.metadata["encoder_backend"].value == "tiktoken" and ev.metadata["mismatched_documents"].value == 0
    per_source = ev.metadata["per_source"].value
    assert all(v["sampled"] == v["documents"] > 0 for v in per_source.values()), per_source  # small: all of them
    # the samples the trainer will read, in the UI and on disk (stages/tokens/samples.py), recorded in its lineage
    rendered = (tmp_path / "storage" / layout.RENDERED_SAMPLES).read_text()
    ui = shards["rendered_samples"].value  # the file's text, long lines broken for the UI
    assert shards["shown_samples"].value == 30
    assert ui.replace(samples_lib.WRAP_MARK + "\n", "").replace(samples_lib.UI_NOTE, "") == rendered
    assert shards["scrubbed_words"].value == 0 and shards["withheld_samples"].value == 0
    lineage = json.loads((tmp_path / "storage" / layout.LINEAGE.format(asset="token_shards")).read_text())
    assert layout.RENDERED_SAMPLES in json.dumps(lineage)
    assert not any(f["path"].endswith(".md") for f in manifest["files"])  # never published

    # a shard corrupted after the fact: re-checking the manifest trips its gate, naming the file
    shard = tmp_path / "storage" / "mix" / manifest["splits"]["train"]["shards"][0]["path"]
    rel = str(shard.relative_to(tmp_path / "storage" / "mix"))
    data = bytearray(shard.read_bytes())
    data[7] ^= 0xFF
    shard.write_bytes(bytes(data))
    gate = dg.AssetCheckKey(dg.AssetKey("manifest"), MANIFEST_SELF_CONSISTENT)
    again = run(assets, res, selection=dg.AssetSelection.checks(gate))
    assert not again.success
    ev = next(e for e in again.get_asset_check_evaluations() if e.check_name == MANIFEST_SELF_CONSISTENT)
    assert not ev.passed and rel in ev.metadata["problem_list"].value
    # and rebuilding the manifest over it is refused by lineage: token_shards' file changed since it was built
    rebuilt = run(assets, res, selection=[dg.AssetKey("manifest")])
    assert not rebuilt.success
    err = rebuilt.get_step_failure_events()[0].event_specific_data.error
    assert "token_shards" in err.to_string() and rel in err.to_string()


def test_shortfall_fails_token_shards_naming_the_source(tmp_path):
    spec, assets, res = setup(tmp_path, shares={"a": 0.1, "b": 0.9}, target_tokens=200_000)
    result = run(assets, res)
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure and e.step_key == "token_shards")
    err, messages = failure.event_specific_data.error, []
    while err is not None:
        messages.append(err.message)
        err = err.cause
    assert any("ShortfallError: source 'b' cannot fill its token budget: it needs 180,000" in m for m in messages)
    assert result.asset_materializations_for_node("manifest") == []


def test_stage_composes_with_sources_and_publish(tmp_path):
    from mix_assets.stages.publish.assets import build_publish_assets
    from mix_assets.stages.sources.assets import build_source_assets
    from mix_assets.config import REPO_ROOT, load_spec

    spec = load_spec(REPO_ROOT / "configs" / "demo.yaml")
    defs = dg.Definitions(
        assets=[*build_source_assets(spec), *build_split_assets(spec), *build_tokens_assets(spec),
                *build_manifest_assets(spec), *build_publish_assets(spec)],
        resources={"mix": MixResource(config_path=spec.config_path)},
    )
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    parents = lambda k: {p.to_user_string() for p in graph.get(dg.AssetKey(k)).parent_keys}  # noqa: E731
    assert parents("validation_split") >= {"exclusion_masks", "dedup_keys", *(f"raw/{s.name}" for s in spec.sources)}
    assert parents("token_shards") == {"tokenizer", "validation_split"}
    assert "token_shards" in parents("manifest") and "manifest" in parents("published_revision")
    for key in ("validation_split", "tokenizer", "token_shards", "manifest"):
        node = graph.get(dg.AssetKey(key))
        assert node.owners == spec.owners and node.description and node.code_version


def test_separator_not_in_the_tokenizer_fails_right_after_the_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers


    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "word": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "words.json"))
    spec, assets, res = setup(tmp_path, tokenizer={"kind": "file", "path": "words.json"},
                              packing={"separator": "<|endoftext|>"})
    result = run(assets, res)
    assert not result.success
    ev = next(e for e in result.get_asset_check_evaluations() if e.check_name == SEPARATOR_IN_VOCAB)
    assert not ev.passed and "'<|endoftext|>' is not a token of the tokenizer" in ev.description
    assert not any(e.step_key == "token_shards" for e in result.all_events)  # never started


@pytest.mark.parametrize("batch", [500, 2])
def test_ids_that_differ_from_hf_fail_token_ids_match_reference(tmp_path, monkeypatch, batch):
    """A fast encoder that gets one document wrong: the check names it and holds the manifest back (with
    HF's batches of 2 documents too: many encoded ahead while the check compares the ones before)."""
    from mix_assets.stages.tokens import backends, exactness

    monkeypatch.setattr(exactness, "ENCODE_BATCH", batch)

    right = backends.TiktokenEncoder.encode_flat
    wrong = []

    def tampered(self, texts, threads, dtype, separator_id):
        flat, n = right(self, texts, threads, dtype, separator_id)
        if not wrong and len(n) and n[0] > 3:  # the first document of the first chunk: one id changed
            flat = flat.copy()
            flat[2] = (int(flat[2]) + 1) % 256
            wrong.append(texts[0])
        return flat, n

    monkeypatch.setattr(backends.TiktokenEncoder, "encode_flat", tampered)
    spec, assets, res = setup(tmp_path)
    result = run(assets, res)
    assert wrong and not result.success
    ev = next(e for e in result.get_asset_check_evaluations() if e.check_name == TOKEN_IDS_MATCH_REFERENCE)
    assert not ev.passed and ev.metadata["mismatched_documents"].value == 1
    assert "are not HF's" in ev.description and ev.metadata["first_mismatches"].value in ev.description
    assert result.asset_materializations_for_node("manifest") == []


def test_a_reused_token_shards_re_emits_the_stored_exactness_result(tmp_path, monkeypatch):
    """token_ids_match_reference is a pure function of token_shards' artifact key: a rebuild that reuses the
    shards re-emits the stored result without re-encoding, and so does the check alone while the files hash as recorded."""
    from mix_assets.stages.tokens import exactness

    spec, assets, res = setup(tmp_path)
    assert run(assets, res).success

    def never(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(exactness, "check", never)
    again = run(assets, res)
    assert again.success, [e.message for e in again.all_events if e.is_failure]
    ev = next(e for e in again.get_asset_check_evaluations() if e.check_name == TOKEN_IDS_MATCH_REFERENCE)
    assert ev.passed and ev.metadata["mismatched_documents"].value == 0
    # the check alone, its shard files rewritten with the same bytes: still as recorded, still re-emitted
    manifest = json.loads((tmp_path / "storage" / layout.MANIFEST).read_text())
    shard = tmp_path / "storage" / "mix" / manifest["splits"]["val"]["shards"][0]["path"]
    shard.write_bytes(shard.read_bytes())
    gate = dg.AssetCheckKey(dg.AssetKey("token_shards"), TOKEN_IDS_MATCH_REFERENCE)
    assert run(assets, res, selection=dg.AssetSelection.checks(gate)).success


def test_a_rebuild_takes_hf_ids_of_unchanged_sampled_texts_from_the_keyed_store_and_still_catches_a_wrong_id(
        tmp_path, monkeypatch):
    """token_ids_match_reference's HF ids are filed per source sample (stages/tokens/reference_ids.py): a rebuild of
    the same texts (every asset recomputed, MIX_NO_REUSE) encodes none of them again, and a fast encoder that gets a
    document wrong in that rebuild still fails the check (the reused ids are HF's, not the shards')."""
    from mix_assets.stages.common import NO_REUSE_ENV
    from mix_assets.stages.tokens import backends, reference_ids

    encoded = []
    hf_encode = backends.HFEncoder.encode

    def counted(self, texts, threads=1):
        encoded.extend(texts)
        return hf_encode(self, texts, threads)

    monkeypatch.setattr(backends.HFEncoder, "encode", counted)
    spec, assets, res = setup(tmp_path)
    first = run(assets, res)
    assert first.success
    ev = next(e for e in first.get_asset_check_evaluations() if e.check_name == TOKEN_IDS_MATCH_REFERENCE)
    sampled = sum(v["sampled"] for v in ev.metadata["per_source"].value.values())
    assert len(encoded) >= sampled > 0
    assert len(list((tmp_path / "storage" / "keyed" / reference_ids.ASSET).glob("*.json"))) == len(spec.sources)

    right, wrong = backends.TiktokenEncoder.encode_flat, []

    def tampered(self, texts, threads, dtype, separator_id):
        flat, n = right(self, texts, threads, dtype, separator_id)
        if not wrong and len(n) and n[0] > 3:
            flat = flat.copy()
            flat[2] = (int(flat[2]) + 1) % 256
            wrong.append(texts[0])
        return flat, n

    monkeypatch.setattr(backends.TiktokenEncoder, "encode_flat", tampered)
    from mix_assets.stages.tokens import exactness

    texts_read, read_texts = [], exactness._texts
    monkeypatch.setattr(exactness, "_texts", lambda path, want: texts_read.append(path) or read_texts(path, want))
    monkeypatch.setenv(NO_REUSE_ENV, "1")
    shutil.rmtree(tmp_path / "storage" / layout.TOKEN_CACHE_DIR)  # token_shards encodes again (with the fault)
    encoded.clear()
    again = run(assets, res)
    assert wrong and not again.success
    ev = next(e for e in again.get_asset_check_evaluations() if e.check_name == TOKEN_IDS_MATCH_REFERENCE)
    assert not ev.passed and ev.metadata["mismatched_documents"].value == 1
    assert wrong[0] not in encoded and len(encoded) < sampled  # the check encoded none of the sample again
    # the same doc ids of the same documents files: HF's ids came from the store by file, no text was read
    assert texts_read == []


def test_exactness_names_exactly_the_document_whose_first_or_last_id_or_length_differs(tmp_path, monkeypatch):
    """exactness.check compares each sampled document's shard tokens with HF's ids (and the separator) as one flat
    array: an id changed at a document's first or last position, or one id too few, is charged to that document
    alone, never to its neighbour in the comparison."""
    from tokenizers import Tokenizer

    from mix_assets.core.storage import Storage
    from mix_assets.stages.tokens import backends, exactness

    spec, assets, res = setup(tmp_path)
    assert run(assets, res).success
    st = Storage(root=str(tmp_path / "storage"))
    tok = Tokenizer.from_file(st.local_path(layout.TOKENIZER_FILE))
    assert exactness.check(st, spec.seed, tok).mismatches == 0
    app = exactness._appearances(st, json.loads(st.read_text(layout.SHARD_STATS)))
    picks, _ = exactness.choose(app, spec.seed)
    source, rows = sorted(picks.items())[0]
    ids = app.take(rows).column("doc_id").to_pylist()
    texts = exactness._texts(st.source(layout.RAW_DOCS.format(source=source)), set(ids))
    target = texts[ids[len(ids) // 2]]  # a document in the middle of its source's sample
    hf_encode = backends.HFEncoder.encode
    for change in ("first", "last", "shorter"):
        def tampered(self, batch, threads=1, change=change):
            out = hf_encode(self, batch, threads)
            for t, got in zip(batch, out):
                if t == target and len(got) > 2:
                    if change == "shorter":
                        del got[-1]
                    else:
                        got[0 if change == "first" else -1] = (got[0 if change == "first" else -1] + 1) % 256
            return out

        monkeypatch.setattr(backends.HFEncoder, "encode", tampered)
        rep = exactness.check(st, spec.seed, tok)
        assert rep.sources[source].mismatched == [ids[len(ids) // 2]], change
        assert rep.mismatches == 1 and not rep.passed, change
