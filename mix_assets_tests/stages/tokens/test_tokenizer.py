import hashlib
import json
import random
import subprocess
import sys

import pyarrow as pa
import pytest
from tokenizers import Tokenizer

from mix_assets.core import layout
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.stages.tokens.tokenizer import (
    TokenizerError,
    build_tokenizer,
    fetch_hub,
    identity_of,
    train_bpe,
)
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec

REV = "0123456789abcdef0123456789abcdef01234567"


def _trained(tmp_path):
    texts = [f"the river number {i} runs under the stone bridge" for i in range(300)]
    train_bpe(texts, 300, ["<|endoftext|>", "<|pad|>"], str(tmp_path / "t"))
    return tmp_path / "t" / "tokenizer.json"


def test_train_identity_and_special_tokens(tmp_path):
    p = _trained(tmp_path)
    ident = identity_of("train", str(p.parent))
    assert ident.special_tokens == {"<|endoftext|>": 0, "<|pad|>": 1}
    assert ident.vocab_size == Tokenizer.from_file(str(p)).get_vocab_size(with_added_tokens=True)
    assert ident.files == {"tokenizer/tokenizer.json": hashlib.sha256(p.read_bytes()).hexdigest()}


def test_hub_offline_from_cache(tmp_path, monkeypatch):
    src = _trained(tmp_path)
    # a huggingface_hub cache holding the pinned snapshot, no network needed
    snap = tmp_path / "hub" / "models--org--tok" / "snapshots" / REV
    snap.mkdir(parents=True)
    (snap / "tokenizer.json").write_bytes(src.read_bytes())
    (snap / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    fetch_hub("org/tok", REV, str(out), cache_dir=str(tmp_path / "hub"))
    ident = identity_of("hub", str(out), "org/tok", REV)
    assert sorted(ident.files) == ["tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"]
    assert ident.files["tokenizer/tokenizer.json"] == hashlib.sha256(src.read_bytes()).hexdigest()
    with pytest.raises(TokenizerError, match=r"org/other@0123.*neither reachable nor in the huggingface_hub cache"):
        fetch_hub("org/other", REV, str(tmp_path / "o2"), cache_dir=str(tmp_path / "hub"))


def test_file_kind_and_bad_file(tmp_path):
    src = _trained(tmp_path)
    spec = tiny_spec(tmp_path, tokenizer={"kind": "file", "path": str(src)})
    st = write_upstream(tmp_path, {"a": 30, "b": 30})
    ident = build_tokenizer(st, spec)
    assert ident.kind == "file" and ident.repo_id is None
    assert (tmp_path / layout.TOKENIZER_FILE).read_bytes() == src.read_bytes()
    assert json.loads((tmp_path / layout.TOKENIZER_IDENTITY).read_text())["vocab_size"] == ident.vocab_size
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TokenizerError, match=r"bad.json: not a loadable tokenizer.json"):
        build_tokenizer(st, tiny_spec(tmp_path, tokenizer={"kind": "file", "path": str(bad)}))


def test_the_tokenizer_is_not_written_through_a_symlink_out_of_the_storage_root(tmp_path, tmp_path_factory):
    from mix_assets.core.storage import StorageLinkError

    src = _trained(tmp_path)
    spec = tiny_spec(tmp_path, tokenizer={"kind": "file", "path": str(src)})
    st = write_upstream(tmp_path, {"a": 30, "b": 30})
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "keep.txt").write_text("not the mix's")
    link = tmp_path / layout.TOKENIZER_FILE.rsplit("/", 1)[0]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(StorageLinkError, match=rf"{link} is a symlink to {elsewhere}, outside the storage root"):
        build_tokenizer(st, spec)
    assert [p.name for p in elsewhere.iterdir()] == ["keep.txt"]  # before: tokenizer.json written in there


_TRAIN = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from mix_assets.stages.split.ranges import build_validation_split
from mix_assets.stages.tokens.tokenizer import build_tokenizer
from mix_assets_tests.support.tokens_fixtures import write_upstream
from mix_assets_tests.support.tokens_spec import tiny_spec
root = Path(sys.argv[1]); spec = tiny_spec(root)
st = write_upstream(root, {"a": 300, "b": 300})
build_validation_split(st, ["a", "b"], spec.seed, spec.split.val_fraction)
print(build_tokenizer(st, spec).files["tokenizer/tokenizer.json"])
"""


def test_training_is_deterministic_across_threads(tmp_path):
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[3])
    shas = []
    for threads in ("1", "2"):
        r = subprocess.run([sys.executable, "-c", _TRAIN, str(tmp_path / threads), repo], capture_output=True,
                           text=True, env={"RAYON_NUM_THREADS": threads, "PATH": "/usr/bin"}, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        shas.append(r.stdout.strip())
    assert shas[0] == shas[1]


def test_training_sample_is_train_only(tmp_path):
    spec = tiny_spec(tmp_path, tokenizer={"train_sample_bytes": 10_000_000})
    st = write_upstream(tmp_path, {"a": 50, "b": 50})
    split = build_validation_split(st, ["a", "b"], spec.seed, 0.3)
    from mix_assets.stages.tokens.tokenizer import training_sample

    raw = {s: st.local_path(layout.RAW_DOCS.format(source=s)) for s in "ab"}
    texts = list(training_sample(st.local_path(layout.VALIDATION_SPLIT), raw, {"a": 0.5, "b": 0.5},
                                 10_000_000, spec.seed))
    n_train = split.docs - split.val_docs
    assert len(texts) <= n_train < split.docs


def _training_sample_reference(split_path, raw_paths, shares, sample_bytes, seed):
    """The per-document code training_sample replaced (whole split in memory, a full sort per source)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from mix_assets.core.seeded import unit_hash

    split = pq.read_table(split_path, columns=["doc_id", "source", "n_bytes", "split"])
    split = split.filter(pc.equal(split.column("split"), "train"))
    for source in sorted(raw_paths):
        rows = split.filter(pc.equal(split.column("source"), source))
        ids, nb = rows.column("doc_id").to_pylist(), rows.column("n_bytes").to_pylist()
        order = sorted(range(len(ids)), key=lambda i: (unit_hash(seed, f"tok:{ids[i]}"), ids[i]))
        quota, total, chosen = shares[source] * sample_bytes, 0, []
        for i in order:
            if total >= quota:
                break
            chosen.append(ids[i])
            total += nb[i]
        t = pq.read_table(raw_paths[source], columns=["doc_id", "text"])
        text = dict(zip(t.column("doc_id").to_pylist(), t.column("text").to_pylist()))
        yield from (text[d] for d in chosen if text[d])


@pytest.mark.parametrize("sample_bytes", [0, 1, 700, 5_000, 10_000_000])
def test_training_sample_streams_the_same_sample_as_the_full_sort(tmp_path, sample_bytes):
    import pyarrow.parquet as pq

    from mix_assets.stages.tokens.tokenizer import training_sample

    rng = random.Random(sample_bytes)
    raw, rows = {}, []
    for s in ("a", "b"):
        ids = [f"{s}-{i:04d}" for i in range(300)]
        texts = ["" if rng.random() < 0.05 else "w " * rng.randrange(0, 60) for _ in ids]
        pq.write_table(pa.table({"doc_id": ids, "text": texts}), tmp_path / f"{s}.parquet")
        raw[s] = str(tmp_path / f"{s}.parquet")
        rows += [(d, s, len(t.encode()), "val" if rng.random() < 0.1 else "train") for d, t in zip(ids, texts)]
    rows.sort()
    split = pa.table(dict(zip(["doc_id", "source", "n_bytes", "split"], map(list, zip(*rows)))))
    pq.write_table(split, tmp_path / "split.parquet", row_group_size=97)  # many row groups and batches
    shares = {"a": 0.7, "b": 0.3}
    got = list(training_sample(str(tmp_path / "split.parquet"), raw, shares, sample_bytes, 11))
    assert got == list(_training_sample_reference(str(tmp_path / "split.parquet"), raw, shares, sample_bytes, 11))
