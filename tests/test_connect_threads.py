"""`GPUFLEET_THREADS`: every DuckDB connection of the pipeline uses no more threads than it
names (the suite itself runs with 1: tests/conftest.py), and a value that is no number of
threads is one line naming the variable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base.connect import THREADS_VARIABLE, connect
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import connect_read_only


def _threads(con: object) -> int:
    return int(con.execute("select current_setting('threads')").fetchone()[0])  # type: ignore[attr-defined]


def test_unset_leaves_duckdb_its_default_and_a_cap_lowers_an_asked_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    with connect() as default, connect(config={"threads": 3}) as asked:
        assert _threads(asked) == 3
        assert _threads(default) >= 1
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    with (
        connect() as capped,
        connect(config={"threads": 3}) as lower,
        connect(config={"threads": 1}) as fewer,
    ):
        assert (_threads(capped), _threads(lower), _threads(fewer)) == (2, 2, 1)


def test_a_reader_of_the_warehouse_an_ingest_wrote_uses_the_cap(
    monkeypatch: pytest.MonkeyPatch, config: Config
) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    ingest(config)
    with connect_read_only(config) as con:
        assert _threads(con) == 1


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_value_that_is_no_number_of_threads_is_one_line(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, value)
    with pytest.raises(GpufleetError, match=rf"^GPUFLEET_THREADS='{value}': not a whole number"):
        connect()


def test_the_command_line_names_the_variable(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpufleet", "--data-dir", str(tmp_path / "data"), "ingest"],
        env={**os.environ, THREADS_VARIABLE: "many"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith("GPUFLEET_THREADS='many': not a whole number of threads above 0")
    ), result.stderr
