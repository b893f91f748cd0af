"""The order `make test` starts the test files in (tests/conftest.py's in_file_order): those
that start processes or stacks first, then by how many tests they hold."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from tests.conftest import in_file_order

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def _item(nodeid: str, *markers: str) -> pytest.Item:
    """What in_file_order reads of a collected test: its id and its markers."""
    names = set(markers)
    found: Any = lambda name: pytest.mark.slow if name in names else None  # noqa: E731
    return cast(pytest.Item, SimpleNamespace(nodeid=nodeid, get_closest_marker=found))


def test_files_starting_processes_come_first_then_the_larger_files() -> None:
    items = [
        _item("tests/test_a.py::one"),
        _item("tests/test_big.py::one"),
        _item("tests/test_big.py::two[x]"),
        _item("tests/test_big.py::two[y]"),
        _item("tests/test_demo.py::fast"),
        _item("tests/test_demo.py::end_to_end", "slow"),
        _item("tests/test_b.py::one"),
        _item("tests/test_b.py::two"),
        _item("tests/test_s3.py::one", "stack"),
    ]
    ordered = [item.nodeid for item in in_file_order(items)]
    assert ordered == [
        "tests/test_demo.py::fast",  # each file's tests stay together, in their order
        "tests/test_demo.py::end_to_end",
        "tests/test_s3.py::one",
        "tests/test_big.py::one",
        "tests/test_big.py::two[x]",
        "tests/test_big.py::two[y]",
        "tests/test_b.py::one",
        "tests/test_b.py::two",
        "tests/test_a.py::one",
    ]


def test_make_test_keeps_that_order() -> None:
    """pytest-xdist sorts the files by their number of tests unless told not to."""
    text = MAKEFILE.read_text(encoding="utf-8")
    for target in ("test", "test-fast"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M)
        assert recipe is not None, target
        command = recipe.group(1).replace("\\\n", " ")
        assert "--dist loadfile" in command and "--no-loadscope-reorder" in command, target
