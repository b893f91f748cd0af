"""Deleting a few rows of every series from a table in series order, a range of series at a
time (gpufleet/warehouse/base/deletes.py): it fits in a memory cap that one statement does
not, and deletes the same rows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from gpufleet.warehouse.base import deletes

pytestmark = pytest.mark.fleet

SERIES = 100
ROWS_PER_SERIES = 245_760  # two of DuckDB's row groups each


def _series_table(path: Path) -> None:
    """`samples`: SERIES series of ROWS_PER_SERIES 10 s ticks, in series and time order
    (row i is series i // ROWS_PER_SERIES's tick i % ROWS_PER_SERIES: in that order without
    a sort of its 24.6 million rows, about half of the file's CPU time)."""
    with duckdb.connect(str(path)) as con:
        con.execute(
            f"""
            create table samples as
            select (i // {ROWS_PER_SERIES})::int as series_id,
                timestamp '2026-01-01' + to_seconds(i % {ROWS_PER_SERIES} * 10) as ts,
            from range({SERIES} * {ROWS_PER_SERIES}) as rows(i)
            """
        )


def test_an_hour_of_every_series_is_deleted_under_a_cap_one_statement_overruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The expiry's delete of the oldest day, at scale: every row group loses a few rows."""
    path = tmp_path / "series.duckdb"
    _series_table(path)
    cut = dt.datetime(2026, 1, 1, 1)
    with duckdb.connect(str(path)) as con:
        con.execute("set memory_limit = '20MB'")
        con.execute("begin")
        # One statement holds a 256 KB block per row group it deletes from (200 here).
        with pytest.raises(duckdb.OutOfMemoryException):
            con.execute("delete from samples where ts < ?", [cut])
        con.execute("rollback")
    monkeypatch.setattr(deletes, "BATCH_ROWS", 1_000_000)  # about 8 row groups at a time
    with duckdb.connect(str(path)) as con:
        con.execute("set memory_limit = '20MB'")
        deleted = deletes.delete_in_key_ranges(con, "samples", "ts < ?", [cut], key="series_id")
        left = con.execute("select count(*), min(ts) from samples").fetchall()
    assert deleted == SERIES * 360
    assert left == [(SERIES * (ROWS_PER_SERIES - 360), cut)]


@pytest.mark.parametrize("batch_rows", [1, 7, 50, 10_000])
def test_a_delete_in_ranges_deletes_what_one_statement_deletes(
    batch_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a join (each series' rows from its own time on), sparse ids and a parameter."""
    con = duckdb.connect()
    con.execute(
        """
        create table rows_a as
        select (series * 3 + 5)::int as series_id, tick as ts, tick % 4 as kind,
        from range(40) as series(series), range(60) as ticks(tick)
        order by series_id, ts;
        create table rows_b as from rows_a;
        create table since as
        select (series * 3 + 5)::int as series_id, (series * 7) % 60 as since_ts,
        from range(0, 40, 3) as series(series);
        """
    )
    condition = "{t}.series_id = since.series_id and {t}.ts >= since.since_ts and {t}.kind <> ?"
    con.execute(f"delete from rows_a using since where {condition.format(t='rows_a')}", [2])
    monkeypatch.setattr(deletes, "BATCH_ROWS", batch_rows)
    deleted = deletes.delete_in_key_ranges(
        con,
        "rows_b as kept",
        condition.format(t="kept"),
        [2],
        key="kept.series_id",
        using="since",
    )
    expected = con.execute("select * from rows_a order by all").fetchall()
    assert deleted == 40 * 60 - len(expected) > 0
    assert con.execute("select * from rows_b order by all").fetchall() == expected
