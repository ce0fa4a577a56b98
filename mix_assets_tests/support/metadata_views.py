"""What the asset page shows of a metadata value, for the tests of the stages' metadata: a table's columns
and cells, a `<table>_md`'s columns, Markdown rendered as the UI renders it."""

import re

import dagster as dg
from markdown_it import MarkdownIt

MAX_UI_COLUMNS = 3  # what the asset page shows of a table at 1,600 px (~450 px: kill_rates showed 3.5 of 8)
MARKDOWN = MarkdownIt("commonmark").enable("table")  # the UI renders metadata Markdown with GFM (react-markdown)


class FakeStorage:
    def uri(self, key: str) -> str:
        return f"/store/{key}"


def columns(v: dg.TableMetadataValue) -> list[str]:
    return [c.name for c in v.schema.columns]


def cells(v: dg.TableMetadataValue, column: str) -> list:
    return [r.data[column] for r in v.records]


def full_columns(v: dg.MarkdownMetadataValue) -> list[str]:
    """The columns of a `<table>_md`: its header, or (a short one, shown inline) its first row's pairs."""
    text = v.value
    if text.startswith("| "):
        return [c.strip() for c in text.splitlines()[0].strip("| ").split(" | ")]
    return re.findall(r"(?:^- | · )(\w+) ", text.splitlines()[0])
