"""A build's DuckDB takes what the rest of the process leaves of its memory budget (issue 19).

A cycle ingests, then builds, in one process: after a cycle that loaded many hours at once,
the ingest's freed pages are still held by polars' allocator, and a build that let DuckDB
take its whole cap on top of them peaked at 2.6 GB. The build caps DuckDB at its start, and
again before each step while the cap is lower or the process is large.
"""

from __future__ import annotations

import re

import duckdb
import pytest

from gpufleet.warehouse.build import build_models, memory
from gpufleet.warehouse.build import full as full_module
from gpufleet.warehouse.build import models as models_module
from tests.test_incremental import MARTS, SAMPLES_PER_GPU, _arrive, _fleet, assert_same_marts

pytestmark = pytest.mark.fleet

MIB = memory.MIB
SHOWN = 103 * MIB  # DuckDB shows its cap to a tenth of a GiB ('1.0 GiB' for 1.09)


def _shown(limit: int) -> str:
    """How DuckDB shows a cap of `limit` bytes."""
    con = duckdb.connect()
    con.execute(f"set memory_limit = '{limit}B'")
    row = con.execute("select current_setting('memory_limit')").fetchone()
    assert row is not None
    return str(row[0])


def _setting(con: duckdb.DuckDBPyConnection) -> str:
    row = con.execute("select current_setting('memory_limit')").fetchone()
    assert row is not None
    return str(row[0])


def _limit_bytes(con: duckdb.DuckDBPyConnection) -> float:
    """DuckDB's cap as it shows it (to SHOWN)."""
    shown = re.fullmatch(r"([0-9.]+) (KiB|MiB|GiB)", _setting(con))
    assert shown is not None
    number, unit = shown.groups()
    return float(number) * {"KiB": 1024, "MiB": MIB, "GiB": 1024 * MIB}[unit]


def test_duckdb_gets_what_the_rest_of_the_process_leaves() -> None:
    little, budget = 300 * MIB, memory.PROCESS_MEMORY_BUDGET
    assert memory.build_memory_limit(little, 0) == memory.BUILD_MEMORY_LIMIT
    # what DuckDB holds itself is not taken from it
    assert memory.build_memory_limit(little + 1000 * MIB, 1000 * MIB) == memory.BUILD_MEMORY_LIMIT
    assert memory.build_memory_limit(1200 * MIB, 100 * MIB) == budget - 1100 * MIB
    assert memory.build_memory_limit(5000 * MIB, 0) == memory.MIN_BUILD_MEMORY
    assert memory.build_memory_limit(None, 0) == memory.BUILD_MEMORY_LIMIT  # no /proc


def test_the_cap_is_measured_at_a_builds_start_and_while_it_is_lower(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A build that starts with the full cap keeps it unless the process grows past
    MEASURE_ABOVE (the rest of the process does not grow while it builds); one that starts
    lower measures again before each step, and gets the full cap back once the rest has let
    go of its memory. The process's size is set here, as no test can make polars'
    allocator hold pages on demand."""
    con = duckdb.connect()
    held = 0

    monkeypatch.setattr(memory, "resident_bytes", lambda: held + memory.duckdb_bytes(con))
    held = 100 * MIB
    assert memory.fit_memory_limit(con, measure=True) == memory.BUILD_MEMORY_LIMIT
    held = 1000 * MIB  # below MEASURE_ABOVE: not measured
    assert memory.fit_memory_limit(con) == memory.BUILD_MEMORY_LIMIT
    assert _setting(con) == _shown(memory.BUILD_MEMORY_LIMIT)
    assert memory.fit_memory_limit(con, measure=True) == memory.PROCESS_MEMORY_BUDGET - held
    held = 100 * MIB
    assert memory.fit_memory_limit(con) == memory.BUILD_MEMORY_LIMIT
    held = 1700 * MIB  # above MEASURE_ABOVE: measured even at the full cap
    assert memory.fit_memory_limit(con) == memory.MIN_BUILD_MEMORY
    assert _setting(con) == _shown(memory.MIN_BUILD_MEMORY)
    held = 1000 * MIB
    assert memory.fit_memory_limit(con) == memory.PROCESS_MEMORY_BUDGET - held
    held = 100 * MIB
    assert memory.fit_memory_limit(con) == memory.BUILD_MEMORY_LIMIT
    assert _setting(con) == _shown(memory.BUILD_MEMORY_LIMIT)


def test_resident_bytes_counts_memory_the_process_touches() -> None:
    before = memory.resident_bytes()
    assert before is not None
    held = b"\x01" * (200 * MIB)
    after = memory.resident_bytes()
    assert after is not None and after - before >= 190 * MIB
    del held


def test_a_build_in_a_process_holding_memory_caps_duckdb_and_builds_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every step of a full build (in slices) and of an incremental one is capped by what
    the process holds outside DuckDB; the marts are those of a build in a process holding
    less."""
    monkeypatch.setattr(full_module, "FULL_BUILD_CHUNK_SAMPLES", 25_000)  # 4 slices
    # the reference's caps are whatever this test process leaves (pytest holds much)
    reference, capped = _fleet(), _fleet()
    for fleet in (reference, capped):
        _arrive(fleet.con, 0, SAMPLES_PER_GPU * 5, "true")
    assert build_models(reference.con, reference.config).mode == "full"

    caps: list[int] = []
    real_fit = memory.fit_memory_limit

    def fit(con: duckdb.DuckDBPyConnection, *, measure: bool = False) -> int:
        limit = real_fit(con, measure=measure)
        caps.append(limit)
        assert _limit_bytes(con) == pytest.approx(limit, abs=SHOWN)
        return limit

    monkeypatch.setattr(models_module, "fit_memory_limit", fit)
    monkeypatch.setattr(full_module, "fit_memory_limit", fit)
    monkeypatch.setattr("gpufleet.warehouse.build.incremental.run.fit_memory_limit", fit)
    resident = memory.resident_bytes()
    assert resident is not None
    # enough that the rest of the process leaves DuckDB 400 MB less than its full cap
    rest = resident - memory.duckdb_bytes(capped.con)
    budget, full_cap = memory.PROCESS_MEMORY_BUDGET, memory.BUILD_MEMORY_LIMIT
    held = b"\x01" * max(0, budget - full_cap - rest + 400 * MIB)
    assert build_models(capped.con, capped.config).mode == "full"
    full_steps = len(caps)
    for fleet in (reference, capped):
        _arrive(fleet.con, SAMPLES_PER_GPU * 5, SAMPLES_PER_GPU * 10, "true")
    assert build_models(reference.con, reference.config).mode == "incremental"
    assert build_models(capped.con, capped.config).mode == "incremental"
    assert full_steps > 4 and len(caps) > full_steps  # every model, every slice, and then some
    assert all(memory.MIN_BUILD_MEMORY <= cap <= full_cap - 200 * MIB for cap in caps)
    assert_same_marts(capped.con, reference.con, MARTS)
    del held
    limit = memory.fit_memory_limit(capped.con)  # what it sets is what it works out
    assert _limit_bytes(capped.con) == pytest.approx(limit, abs=SHOWN)
