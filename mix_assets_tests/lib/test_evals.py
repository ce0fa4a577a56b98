import json
import os
import sys

import pytest
from pydantic import ValidationError

from mix_assets.config import EvalTask, HubDataset, LocalEvalFiles, is_test_split
from mix_assets.lib import evals as E

# Every file opened by Python in this process is seen here; the fixtures' test.jsonl must never be.
_OPENED: list[str] = []
_ARMED = [False]  # armed once the fixture files are written


def _hook(event, args):
    if _ARMED[0] and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.fsdecode(args[0])
        if path.endswith("test.jsonl") and "evalfix" in path:
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
    _ARMED[0] = True
    yield d
    _ARMED[0] = False
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
    assert "validation.jsonl:2" in str(e.value) and "secret" not in str(e.value)


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
