import json
import os
import sys
import traceback

import pytest
from pydantic import ValidationError

from mix_assets.stages.audit.config import EvalTask, LocalEvalFiles, is_test_split
from mix_assets.stages.sources.config import HubDataset
from mix_assets.stages.audit import evals as E
from mix_assets_tests.support.audit_fixtures import BAD_ROWS, CANARY, GOOD_ROW, write_card_repo

# Every file opened by Python in this process is seen here; the fixtures' test.jsonl must never be,
# nor anything below a path in _FORBIDDEN (a test folder, a file a symlink or a split name points at).
_OPENED: list[str] = []
_ARMED = [False]  # armed once the fixture files are written
_FORBIDDEN: list[str] = []


def _hook(event, args):
    if _ARMED[0] and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if (path.endswith("test.jsonl") and "evalfix" in path) or any(path.startswith(p) for p in _FORBIDDEN):
            _OPENED.append(path)
            raise AssertionError("a test split file was opened")


sys.addaudithook(_hook)


@pytest.fixture
def evalfix(tmp_path):
    d = tmp_path / "evalfix"
    d.mkdir()
    rows = [
        {"question": {"stem": "Which gas do plants absorb from the air during photosynthesis in daylight?",
                      "choices": [{"text": "carbon dioxide", "label": "A"}, {"text": "oxygen", "label": "B"}]},
         "answerKey": "A"},
        {"question": {"stem": "What tool measures air pressure?", "choices": [{"text": "a barometer"}]}},
    ]
    (d / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "test.jsonl").write_text(json.dumps({"question": {"stem": "TEST ITEM NEVER READ", "choices": []}}) + "\n")
    _OPENED.clear()
    _FORBIDDEN.clear()
    _ARMED[0] = True
    yield d
    _ARMED[0] = False
    _FORBIDDEN.clear()
    assert not _OPENED, "test split opened"


def _task(path, splits=("validation",), fields=("question.stem", "question.choices.text"), **kw):
    # model_construct skips the config validator, so the loader's own refusal is what is tested.
    return EvalTask.model_construct(
        name="arc_fixture", dataset=LocalEvalFiles(path=str(path)), scored_split="validation",
        audit_splits=list(splits), fields=list(fields), min_rows=1, note="", **kw,
    )


@pytest.mark.parametrize("split", ["test", "TEST", "Test[:10%]", "validation+test", "eval_test", "test_set",
                                   "tests", "testing", "test_matched"])
def test_loader_refuses_test_splits_naming_the_task(evalfix, split):
    with pytest.raises(E.TestSplitRefused, match="arc_fixture"):
        E.iter_rows(_task(evalfix), evalfix.parent, split)
    # A registry listing a test split among valid ones reads nothing at all, validation included.
    with pytest.raises(E.TestSplitRefused, match="arc_fixture"):
        E.load_task_items(_task(evalfix, splits=("validation", split)), evalfix.parent)
    assert not _OPENED


def test_the_hook_would_catch_an_opened_test_file(evalfix):
    with pytest.raises(AssertionError):
        open(evalfix / "test.jsonl").close()
    _OPENED.clear()


def test_symlink_to_test_file_is_refused(evalfix, tmp_path):
    d = tmp_path / "evalfix_link"
    d.mkdir()
    (d / "validation.jsonl").symlink_to(evalfix / "test.jsonl")  # symlink creation opens nothing
    with pytest.raises(E.TestSplitRefused, match="arc_fixture"):
        E.load_task_items(_task(d), tmp_path)


def test_config_refuses_test_split():
    with pytest.raises(ValidationError, match="test splits are never audited"):
        EvalTask(name="t", dataset=LocalEvalFiles(path="x"), scored_split="test",
                 audit_splits=["validation", "Test"], fields=["q"])
    assert not is_test_split("contest") and not is_test_split("validation") and is_test_split("dev+test")


def test_items_stem_plus_each_choice(evalfix):
    items = E.load_task_items(_task(evalfix), evalfix.parent)
    assert items.rows == 2 and items.rows_per_split == {"validation": 2}
    assert items.strings == 5  # 2 stems + 3 choice texts
    assert items.items == [
        "Which gas do plants absorb from the air during photosynthesis in daylight? carbon dioxide",
        "Which gas do plants absorb from the air during photosynthesis in daylight? oxygen",
        "What tool measures air pressure? a barometer",
    ]


def test_missing_field_names_file_row_field_not_text(evalfix):
    with pytest.raises(E.EvalDataError) as e:
        E.load_task_items(_task(evalfix, fields=("question.stem", "question.answer")), evalfix.parent)
    msg = str(e.value)
    assert "validation.jsonl" in msg and "row 1" in msg and "question.answer" in msg
    assert "photosynthesis" not in msg


def test_bad_json_names_line_without_text(tmp_path):
    d = tmp_path / "evalfix"
    d.mkdir()
    (d / "validation.jsonl").write_text('{"q": "fine row"}\n{"q": "broken secret row\n')
    with pytest.raises(E.EvalDataError) as e:
        E.load_task_items(_task(d, fields=("q",)), tmp_path)
    assert "validation.jsonl row 2" in str(e.value) and "secret" not in str(e.value)


def test_hub_layout_reads_only_the_requested_split(tmp_path, hf_offline):
    repo = tmp_path / "evalfix_hub"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "validation.jsonl").write_text(json.dumps({"goal": "pour the water", "sol1": "slowly"}) + "\n")
    (repo / "data" / "test.jsonl").write_text(json.dumps({"goal": "TEST ITEM", "sol1": "never"}) + "\n")
    _OPENED.clear()
    _ARMED[0] = True
    task = EvalTask(name="piqa_fixture", dataset=HubDataset(repo_id=str(repo), revision="v1.0"),
                    scored_split="validation", audit_splits=["validation"], fields=["goal", "sol1"])
    try:
        items = E.load_task_items(task, tmp_path)
    finally:
        _ARMED[0] = False
    assert items.rows == 1 and items.items == ["pour the water slowly"]
    assert not _OPENED


# -- issue 11: errors never quote a cell ---------------------------------------------------------

def assert_no_canary(exc: BaseException, capfd, caplog) -> str:
    """The exception (message, repr, printed traceback with its chain) and all output are canary-free."""
    shown = "".join(traceback.format_exception(exc))
    out, err = capfd.readouterr()
    for where, blob in (("str", str(exc)), ("repr", repr(exc)), ("traceback", shown), ("stdout", out),
                        ("stderr", err), ("logs", caplog.text)):
        assert CANARY not in blob, where
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)
    return str(exc)


def _hub_task(repo, name="hub_fixture", splits=("validation",), data_files=None):
    return EvalTask.model_construct(
        name=name, dataset=HubDataset(repo_id=str(repo), revision="v1.0", data_files=data_files),
        scored_split="validation", audit_splits=list(splits), fields=["question"], min_rows=1, note="")


# (hub, deep_nesting) crashed the process inside pyarrow (SIGSEGV): it runs in a subprocess, through the
# CLI, in mix_assets_tests/test_audit_published_cli.py.
@pytest.mark.parametrize("kind,case", [(k, c) for k in ("local", "hub") for c in sorted(BAD_ROWS)
                                       if (k, c) != ("hub", "deep_nesting")])
def test_bad_rows_name_task_file_row_field_never_text(tmp_path, capfd, caplog, hf_offline, kind, case):
    line, fld = BAD_ROWS[case]
    if kind == "local":
        d = tmp_path / "evalfix"
        d.mkdir()
        (d / "validation.jsonl").write_bytes(GOOD_ROW + line)
        task, file = _task(d, fields=("question",)), "validation.jsonl"
    else:
        (tmp_path / "hubrepo" / "data").mkdir(parents=True)
        (tmp_path / "hubrepo" / "data" / "validation.jsonl").write_bytes(GOOD_ROW + line)
        task, file = _hub_task(tmp_path / "hubrepo"), "data/validation.jsonl"
    with pytest.raises(E.EvalDataError) as e:
        E.load_task_items(task, tmp_path)
    msg = assert_no_canary(e.value, capfd, caplog)
    assert task.name in msg and file in msg and "row 2" in msg, msg
    if fld:
        assert f"field {fld!r}" in msg, msg


def test_card_type_mismatch_cast_error_never_quotes_the_cell(tmp_path, capfd, caplog, hf_offline):
    # The card says int64, the Parquet column holds text: pyarrow's cast error quotes the cell.
    repo = write_card_repo(tmp_path / "castrepo", "  - name: question\n    dtype: int64\n",
                      [{"question": f"In the {CANARY} story who counted?"},
                       {"question": f"Another {CANARY} row"}])
    with pytest.raises(E.EvalDataError) as e:
        E.load_task_items(_hub_task(repo), tmp_path)
    msg = assert_no_canary(e.value, capfd, caplog)
    assert "hub_fixture" in msg and "data/validation.parquet" in msg and "row" in msg
    assert "question: int64" in msg and "ArrowInvalid" in msg, msg


def test_corrupt_parquet_names_the_file_not_its_bytes(tmp_path, capfd, caplog, hf_offline):
    repo = tmp_path / "badpq"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "validation.parquet").write_bytes(b"PAR1" + CANARY.encode() * 50 + b"garbage")
    with pytest.raises(E.EvalDataError) as e:
        E.load_task_items(_hub_task(repo), tmp_path)
    assert "data/validation.parquet" in assert_no_canary(e.value, capfd, caplog)


def test_valid_parquet_hub_task_reads_only_its_split(tmp_path, hf_offline):
    # The card lists test first and declares no features: datasets would read the first listed
    # file's schema to infer them; only validation.parquet may be opened.
    repo = tmp_path / "pqrepo"
    (repo / "data").mkdir(parents=True)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"question": ["Why is the sky blue at noon?", None]}), repo / "data" / "validation.parquet")
    pq.write_table(pa.table({"question": ["TEST ONLY"]}), repo / "data" / "test.parquet")
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n"
                                    "    path: data/test.parquet\n  - split: validation\n"
                                    "    path: data/validation.parquet\n---\n")
    _OPENED.clear()
    _FORBIDDEN[:] = [str(repo / "data" / "test.parquet")]
    _ARMED[0] = True
    try:
        items = E.load_task_items(_hub_task(repo), tmp_path)
    finally:
        _ARMED[0] = False
        _FORBIDDEN.clear()
    assert not _OPENED
    assert (items.rows, items.empty_rows, items.items) == (1, 1, ["Why is the sky blue at noon?"])


# -- issue 11: test files are refused by path, not only by split name ----------------------------


def _write_hub_repo(repo):
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "validation.jsonl").write_text(json.dumps({"question": "Which way does the river run?"}) + "\n")
    (repo / "data" / "test.jsonl").write_text(json.dumps({"question": f"TEST {CANARY}"}) + "\n")
    return repo


def _refused(task, spec_dir, forbidden) -> str:
    """The loader refuses `task` without opening anything below the `forbidden` paths."""
    _OPENED.clear()
    _FORBIDDEN[:] = [str(p) for p in forbidden]
    _ARMED[0] = True
    try:
        with pytest.raises(E.TestSplitRefused) as e:
            E.load_task_items(task, spec_dir)
    finally:
        _ARMED[0] = False
        _FORBIDDEN.clear()
    assert not _OPENED, _OPENED
    assert task.name in str(e.value) and CANARY not in str(e.value)
    return str(e.value)


@pytest.mark.parametrize("data_files", [["data/test.jsonl"], ["data/*.jsonl"], ["./data/../data/test.jsonl"]])
def test_hub_data_files_naming_a_test_file_are_refused(tmp_path, hf_offline, data_files):
    # data_files puts every file in the "train" split: auditing "train" would read test.jsonl.
    repo = _write_hub_repo(tmp_path / "hubrepo")
    msg = _refused(_hub_task(repo, splits=["train"], data_files=data_files), tmp_path, [repo / "data" / "test.jsonl"])
    assert "data/test.jsonl" in msg


def test_hub_data_file_symlinked_to_a_test_file_is_refused(tmp_path, hf_offline):
    repo = tmp_path / "hubrepo"
    (repo / "data").mkdir(parents=True)
    (repo / "heldout").mkdir()
    (repo / "heldout" / "test.jsonl").write_text(json.dumps({"question": CANARY}) + "\n")
    (repo / "data" / "validation.jsonl").symlink_to(repo / "heldout" / "test.jsonl")
    _refused(_hub_task(repo), tmp_path, [repo / "heldout"])


def test_remote_hub_data_files_naming_a_test_file_are_refused(tmp_path, fake_hub):
    from huggingface_hub import CommitOperationAdd

    api = fake_hub.api()
    api.create_repo("org/evals", repo_type="dataset")
    api.create_commit("org/evals", [CommitOperationAdd("data/test.jsonl", json.dumps({"question": CANARY}).encode()),
                                    CommitOperationAdd("data/dev.jsonl", b'{"question": "fine"}\n')],
                      commit_message="data", repo_type="dataset")
    api.create_tag("org/evals", tag="v1.0", repo_type="dataset")
    task = EvalTask.model_construct(
        name="remote_fixture", dataset=HubDataset(repo_id="org/evals", revision="v1.0", data_files=["data/test.jsonl"]),
        scored_split="validation", audit_splits=["train"], fields=["question"], min_rows=1, note="")
    with pytest.raises(E.TestSplitRefused, match="remote_fixture") as e:
        E.load_task_items(task, tmp_path)
    assert "org/evals@v1.0:data/test.jsonl" in str(e.value)
    assert not [p for m, p in fake_hub.requests if p.endswith("data/test.jsonl") and m == "GET"]
    # The same repo read through a file that is not a test file works, remotely.
    ok = task.model_copy(update={"dataset": HubDataset(repo_id="org/evals", revision="v1.0",
                                                       data_files=["data/dev.jsonl"])})
    assert E.load_task_items(ok, tmp_path).items == ["fine"]


def test_eval_folder_symlinked_to_a_test_folder_is_refused(tmp_path):
    held = tmp_path / "arc" / "test"
    held.mkdir(parents=True)
    (held / "validation.jsonl").write_text(json.dumps({"question": CANARY}) + "\n")
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "arc").symlink_to(held, target_is_directory=True)
    msg = _refused(_task(tmp_path / "evals" / "arc", fields=("question",)), tmp_path, [held])
    assert "eval folder" in msg
    # Written relatively in the config, a test folder is refused too.
    _refused(_task("arc/test", fields=("question",)), tmp_path, [held])


def test_split_file_symlinked_into_another_test_folder_is_refused(tmp_path):
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "arc.jsonl").write_text(json.dumps({"question": CANARY}) + "\n")
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "validation.jsonl").symlink_to(tmp_path / "test" / "arc.jsonl")
    _refused(_task(tmp_path / "evals", fields=("question",)), tmp_path, [tmp_path / "test"])


@pytest.mark.parametrize("split", ["../other/heldout", "sub/validation", "..", "a\\b", ""])
def test_split_names_that_are_paths_are_refused(tmp_path, split):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "heldout.jsonl").write_text(json.dumps({"question": CANARY}) + "\n")
    (tmp_path / "evals").mkdir()
    _refused(_task(tmp_path / "evals", splits=[split], fields=("question",)), tmp_path, [tmp_path / "other"])
    with pytest.raises(ValidationError, match="audit_splits"):
        EvalTask(name="t", dataset=LocalEvalFiles(path="evals"), scored_split="validation",
                 audit_splits=[split], fields=["question"])


def test_config_refuses_test_data_files():
    with pytest.raises(ValidationError, match="'hub_t'.*data_files.*data/test.jsonl"):
        EvalTask(name="hub_t", dataset=HubDataset(repo_id="o/n", revision="v1", data_files=["data/test.jsonl"]),
                 scored_split="validation", audit_splits=["train"], fields=["q"])
    EvalTask(name="hub_t", dataset=HubDataset(repo_id="o/n", revision="v1", data_files=["data/contest.jsonl"]),
             scored_split="validation", audit_splits=["train"], fields=["q"])


# -- issue 11: duplicates and empty rows do not make up min_rows --------------------------------


def test_config_refuses_duplicate_audit_splits():
    with pytest.raises(ValidationError, match="'dup_t'.*audit_splits.*validation.*more than once"):
        EvalTask(name="dup_t", dataset=LocalEvalFiles(path="x"), scored_split="validation",
                 audit_splits=["validation", "validation"], fields=["q"])


def test_loader_refuses_duplicate_audit_splits(evalfix):
    with pytest.raises(E.EvalDataError, match="arc_fixture.*more than once"):
        E.load_task_items(_task(evalfix, splits=("validation", "validation")), evalfix.parent)


def test_rows_without_audited_text_do_not_count_toward_min_rows(tmp_path):
    d = tmp_path / "evalfix"
    d.mkdir()
    rows = [{"question": f"Question number {i} about the mill?", "choices": ["yes", "no"]} for i in range(30)]
    rows += [{"question": None, "choices": []}, {"question": "  ", "choices": [None, ""]}] * 15
    (d / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = E.load_task_items(_task(d, fields=("question", "choices")), tmp_path)
    assert (items.rows, items.empty_rows, items.rows_per_split) == (30, 30, {"validation": 30})
    assert len(items.items) == 60 and items.strings == 90
