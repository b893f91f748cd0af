"""The marts' docs file is parsed once and shared by every caller (`shared_docs`,
build/models.py): what it returns cannot be changed, at any level, so that no caller
changes every later build's docs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from gpufleet.warehouse.build.data_tests import load_data_tests
from gpufleet.warehouse.build.models import DOCS_FILE_NAME, SQL_DIR, shared_docs

DOCS_FILE = """
[a]
description = "A."
data_tests = [
    { unique = ["day", "team"] },
    { accepted_values = { column = "kind", values = ["x", "y"] } },
]
[a.columns]
day = "The day."
team = "The team."
kind = "The kind."

[b]
description = "B."
columns_from = "a"
[b.columns]
extra = "Its own."
"""


@pytest.fixture
def docs(tmp_path: Path) -> Any:
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / DOCS_FILE_NAME).write_text(DOCS_FILE, encoding="utf-8")
    return shared_docs(tmp_path)


def _thawed(value: object) -> object:
    """A plain copy of the parse (dicts and lists) to compare."""
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_thawed(item) for item in value]
    return value


def _accepted(docs: Any) -> Any:
    return docs["a"]["data_tests"][1]["accepted_values"]["values"]


# Each level of the parse: the tables, an entry, its columns (its own and inherited), its
# data tests, one test, and the values one accepts.
CHANGES: dict[str, Callable[[Any], object]] = {
    "add a table": lambda docs: docs.__setitem__("c", {}),
    "drop a table": lambda docs: docs.__delitem__("a"),
    "set a description": lambda docs: docs["a"].__setitem__("description", "Changed."),
    "pop an entry's key": lambda docs: docs["a"].pop("columns"),
    "set a column's text": lambda docs: docs["a"]["columns"].__setitem__("day", "Changed."),
    "set an inherited text": lambda docs: docs["b"]["columns"].__setitem__("team", "Changed."),
    "add a data test": lambda docs: docs["a"]["data_tests"].append({"not_null": "day"}),
    "change a data test": lambda docs: docs["a"]["data_tests"][0].__setitem__("unique", "day"),
    "add an accepted value": lambda docs: _accepted(docs).append("z"),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_what_shared_docs_returns_cannot_be_changed_at_any_level(
    tmp_path: Path, docs: Any, change: Callable[[Any], object]
) -> None:
    before = _thawed(docs)
    with pytest.raises((TypeError, AttributeError)):
        change(docs)
    assert _thawed(shared_docs(tmp_path)) == before


def test_the_shared_parse_is_the_files_and_the_same_for_every_caller(
    tmp_path: Path, docs: Any
) -> None:
    assert shared_docs(tmp_path) is docs  # shared, not copied at each call
    assert dict(docs["a"]["columns"]) == {
        "day": "The day.",
        "team": "The team.",
        "kind": "The kind.",
    }
    assert dict(docs["b"]["columns"]) == {**docs["a"]["columns"], "extra": "Its own."}
    assert "columns_from" not in docs["b"]
    tests = load_data_tests(docs, tmp_path / DOCS_FILE_NAME)
    assert [test.label for test in tests] == ["unique(day, team)", "accepted_values(kind)"]


def test_the_marts_docs_file_is_shared_read_only() -> None:
    docs: Any = shared_docs(SQL_DIR)
    with pytest.raises(TypeError):
        docs["samples"]["columns"]["ts"] = "Changed."
    assert shared_docs(SQL_DIR)["samples"] is docs["samples"]
    assert docs["samples"]["columns"]["ts"] != "Changed."
