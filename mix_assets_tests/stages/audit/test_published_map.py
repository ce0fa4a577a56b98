"""stages/audit/published as a map stage: one task per shard on core/engine, the same report as one
sequential scan of each split, whatever the shard cut, the worker count or the engine (local, Ray)."""

from __future__ import annotations

import random

import pytest

from mix_assets.core import engine as eng
from mix_assets.stages.audit import published as P
from mix_assets.stages.tokens.tokenizer import train_bpe
from mix_assets_tests.stages.audit.test_published import (ITEM0, ITEM2, SEP, _docs, _long_words_docs,
                                                       tokenizer_dir, write_token_mix)  # noqa: F401 - fixture
from mix_assets_tests.support.audit_fixtures import filler, make_spec
from mix_assets_tests.support.ray_local import local_ray

RAY2 = eng.Engine(kind="ray", num_cpus=2)


def _sequential(root, ref, max_carry_tokens: int, chunk_tokens: int) -> dict:
    """Each split scanned as ONE range from its first sample: the scan before the map stage."""
    from mix_assets.reader import open_mix

    r = open_mix(root, root / "cache-seq", split="train", shuffle=False, epochs=1)
    sep = r.manifest["packing"]["separator_id"]
    ranges = [P.SampleRange(s, 0, r.manifest["splits"][s]["samples"]) for s in P.SPLITS]
    r.close()
    got = P.scan_ranges(ranges, eng.Engine(num_cpus=1), location=root, cache_dir=None, open_kwargs={},
                        registry=ref.registry, separator_id=sep, chunk_tokens=chunk_tokens,
                        max_carry_tokens=max_carry_tokens)
    return {s: got[s].to_json(sep is not None, ref.denominators) for s in P.SPLITS}


def _cut_often(root, ref, max_carry_tokens: int) -> dict:
    """A range every 3 samples (most cuts inside a document): each resumes from the samples before it."""
    from mix_assets.reader import open_mix

    r = open_mix(root, None, split="train", shuffle=False, epochs=1)
    sep = r.manifest["packing"]["separator_id"]
    n = {s: r.manifest["splits"][s]["samples"] for s in P.SPLITS}
    ranges = [P.SampleRange(s, k, min(k + 3, n[s])) for s in P.SPLITS for k in range(0, n[s], 3)]
    r.close()
    got = P.scan_ranges(ranges, eng.Engine(num_cpus=2), location=root, cache_dir=None, open_kwargs={},
                        registry=ref.registry, separator_id=sep, chunk_tokens=1 << 20,
                        max_carry_tokens=max_carry_tokens)
    return {s: got[s].to_json(sep is not None, ref.denominators) for s in P.SPLITS}


@pytest.mark.parametrize("separator", [True, False])
@pytest.mark.parametrize("seq_len,max_carry", [(8, 1 << 16), (13, 20), (37, 40)])
def test_shard_tasks_equal_one_sequential_scan(tmp_path, tokenizer_dir, separator, seq_len, max_carry):
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    train = _docs(1, planted={3: ITEM0, 17: ITEM2, 30: ITEM0.upper().replace(" ", ",  ")})
    root = tmp_path / "mix"
    m = write_token_mix(root, tokenizer_dir, train, _docs(2, n=12, planted={5: ITEM2}), seq_len, separator,
                        n_shards=7)
    assert all(len(m["splits"][s]["shards"]) == 7 for s in P.SPLITS)
    want = _sequential(root, ref, max_carry, 5 * seq_len)
    assert want["train"]["overlap_ngrams"] > 0 or max_carry < 64  # a tiny cap misses items across samples
    for e in (eng.Engine(num_cpus=1), eng.Engine(num_cpus=2), eng.Engine(num_cpus=4)):
        rep = P.audit_published(root, spec, tmp_path / "c", reference=ref, eng=e, chunk_tokens=5 * seq_len,
                                max_carry_tokens=max_carry)
        assert rep["splits"] == want, e
    assert _cut_often(root, ref, max_carry) == want


def test_long_documents_across_shards_keep_their_carries_and_short_ones(tmp_path):
    """Many tokens per word and a small tail cap: carries grow, some stay short, across 6 shards."""
    tok_dir = tmp_path / "chartok"
    train_bpe([filler(random.Random(9), 50)], 270, [SEP], str(tok_dir))
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    root = tmp_path / "mix"
    write_token_mix(root, tok_dir, _long_words_docs(3, 20, {4: ITEM0, 11: ITEM2}), _long_words_docs(4, 6, {}), 12,
                    n_shards=6)
    for cap in (1 << 16, 20):
        want = _sequential(root, ref, cap, 100)
        assert (want["train"]["short_carries"] > 0) == (cap == 20)
        rep = P.audit_published(root, spec, tmp_path / "c", reference=ref, chunk_tokens=100, max_carry_tokens=cap)
        assert rep["splits"] == want
    assert _cut_often(root, ref, 20) == want


class _Lines:
    def __init__(self):
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)


def test_progress_lines_name_samples_and_tokens(tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    write_token_mix(tmp_path / "mix", tokenizer_dir, _docs(1), _docs(2, n=12), 16, n_shards=3)
    log = _Lines()
    P.audit_published(tmp_path / "mix", spec, tmp_path / "c", log=log, label="shards_audit_clean")
    assert log.lines[-1].startswith("shards_audit_clean: ") and "samples" in log.lines[-1]
    assert "tokens" in log.lines[-1] and "done in" in log.lines[-1]


@pytest.fixture(scope="module")
def ray_instance():
    with local_ray(RAY2) as ray:
        yield ray


@pytest.mark.ray
def test_ray_tasks_write_the_in_process_report(ray_instance, tmp_path, tokenizer_dir):
    spec = make_spec(tmp_path)
    ref = P.load_reference(spec)
    root = tmp_path / "mix"
    write_token_mix(root, tokenizer_dir, _docs(1, planted={9: ITEM0}), _docs(2, n=12, planted={2: ITEM2}), 24,
                    n_shards=5)
    local = P.audit_published(root, spec, tmp_path / "c1", reference=ref, eng=eng.Engine(num_cpus=1))
    on_ray = P.audit_published(root, spec, tmp_path / "c2", reference=ref, eng=RAY2)
    assert P.dumps(on_ray) == P.dumps(local) and local["overlap_total"] > 0


def test_cli_takes_the_worker_count_and_writes_the_same_report(tmp_path, tokenizer_dir):
    from mix_assets.audit_published import main

    spec = make_spec(tmp_path)
    write_token_mix(tmp_path / "mix", tokenizer_dir, _docs(1, planted={9: ITEM0}), _docs(2, n=12), 24, n_shards=4)
    outs = []
    for workers in ("1", "3"):
        out = tmp_path / f"w{workers}.json"
        assert main([str(tmp_path / "mix"), "--config", str(spec.config_path), "--json", str(out),
                     "--workers", workers]) == P.EXIT_OVERLAP
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
