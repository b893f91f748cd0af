"""Closed months (issue 42, item 3): `gpufleet close --month` keeps a month's marts and
showback as they are through reference edits, late files, allocation changes and full
builds, reporting what a build would have changed; `reopen` lets the next build apply it
(docs/operations.md#closing-a-month).

The fleet is tests/test_incremental.py's moved 16 days back: Asia/Kolkata, from
2026-10-30 17:30 to 2026-11-01 17:30 local, so October holds two local days, November
one, and ISO week 2026-W44 (Monday 2026-10-26 to Sunday 2026-11-01) crosses the months.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from gpufleet.cli import main
from gpufleet.close import close, close_month, reopen_month
from gpufleet.errors import GpufleetError
from gpufleet.showback import showback
from gpufleet.warehouse.build import build_models
from gpufleet.warehouse.publish import write_transaction
from tests.templates import made_once
from tests.test_incremental import _fleet, _mart, _references, _source
from tests.test_models_fixtures import NEXT_LOAD, Fleet, built_once

pytestmark = pytest.mark.fleet

TODAY = dt.date(2026, 11, 20)
SHIFT = "interval 16 days"
ZONE = "Asia/Kolkata"
DAY_MARTS = ("gpu_hourly", "run_pieces", "gpu_team_daily", "team_daily", "gpu_daily", "host_daily")
RUN_MARTS = ("idle_episodes", "thermal_events")
HELD_BACK = "gpu_uuid = 'GPU-1' and ts >= timestamptz '2026-10-31 06:00:00+00'"


@functools.cache
def moved_source() -> pa.Table:
    """The fleet's samples (tests/test_incremental.py's `_source()`) 16 days back, made once
    per process."""
    with duckdb.connect(":memory:") as con:
        con.register("_source", _source())
        return con.sql(f"select * replace (ts - {SHIFT} as ts) from _source").to_arrow_table()


def shift_back(con: duckdb.DuckDBPyConnection) -> None:
    """Move the fleet's allocations and job records 16 days back, and its samples to come:
    the connection's view `source` is `moved_source()` from now on (a view, not a table: in
    the warehouse, every catch-up of the other slot would compare its 114,000 rows, and
    every `built_once` copy would hold them)."""
    for table in ("allocations", "slurm_jobs"):
        con.execute(f"update {table} set start_ts = start_ts - {SHIFT}, end_ts = end_ts - {SHIFT}")
    con.register("source", moved_source())


def arrive(con: duckdb.DuckDBPyConnection, where: str = "true") -> None:
    con.execute(
        f"""
        insert into samples_stored by name
        select *, {NEXT_LOAD} as load_id from source where {where} order by gpu_uuid, ts
        """
    )


def fleet(where: str = "true") -> Fleet:
    """The moved fleet with the samples `where` selects, built: a copy of one built once
    per test process (tests/test_models_fixtures.py's built_once), its samples to come the
    view `source` again."""

    def make() -> Fleet:
        built = _fleet()
        shift_back(built.con)
        arrive(built.con, where)
        assert build_models(built.con, built.config).mode == "full"
        return built

    copy = built_once(f"test_close.fleet({where})", make)
    copy.con.register("source", moved_source())
    return copy


@pytest.fixture(scope="module")
def unchanged() -> Fleet:
    """One copy of `fleet()` for the tests that change nothing: commands refused, the whole
    fleet's marts to compare with."""
    return fleet()


def month_rows(con: duckdb.DuckDBPyConnection, month: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every kept mart's rows of the month (a run by the local day of its start)."""
    rows = {
        mart: _mart(con, f"(from {mart} where strftime(day, '%Y-%m') = '{month}')")
        for mart in DAY_MARTS
    }
    for mart in RUN_MARTS:
        rows[mart] = _mart(
            con,
            f"(from {mart} where strftime(timezone('{ZONE}', start_ts)::date, '%Y-%m')"
            f" = '{month}')",
        )
    return rows


def check_weeks_add_up(con: duckdb.DuckDBPyConnection) -> None:
    """team_weekly still sums team_daily, kept days and computed days alike."""
    rows = con.execute(
        """
        select count(*) from (
            select cluster, team, iso_week, round(gpu_hours, 6), round(waste_usd, 6)
            from team_weekly
            except
            select
                cluster,
                team,
                strftime(day, '%G-W%V'),
                round(sum(gpu_hours), 6),
                round(sum(waste_usd), 6),
            from team_daily
            group by all
        )
        """
    ).fetchone()
    assert rows == (0,)


def test_a_user_who_moves_team_after_close_moves_in_the_open_month_only() -> None:
    closed = fleet()
    assert str(close_month(closed.con, closed.config, "2026-10", today=TODAY)).startswith(
        "closed 2026-10: "
    )
    october = month_rows(closed.con, "2026-10")
    # alice moves from ml to vision on the 31st: inside the closed month
    move = (
        'insert into ref_users_dated ("user", team, valid_from)'
        " values ('alice', 'vision', date '2026-10-31')"
    )
    closed.con.execute(move)
    result = build_models(closed.con, closed.config)
    assert result.mode == "incremental"
    assert len(result.kept) == 1 and result.kept[0].startswith("closed 2026-10: kept as closed;")
    assert "reopen --month 2026-10" in str(result)
    assert month_rows(closed.con, "2026-10") == october
    # the open month is what a build with the move gives
    reference = _fleet()
    shift_back(reference.con)
    arrive(reference.con)
    reference.con.execute(move)
    build_models(reference.con, reference.config)
    assert month_rows(closed.con, "2026-11") == month_rows(reference.con, "2026-11")
    teams = closed.con.execute(
        "select distinct team from team_daily where day = date '2026-11-01' order by all"
    ).fetchall()
    assert ("vision",) in teams
    check_weeks_add_up(closed.con)
    # nothing new: up to date, nothing to report
    again = build_models(closed.con, closed.config)
    assert again.mode == "up to date" and again.kept == ()
    # a full build keeps the month too, and says so
    full = build_models(closed.con, closed.config, full=True)
    assert full.mode == "full" and len(full.kept) == 1
    assert month_rows(closed.con, "2026-10") == october
    assert month_rows(closed.con, "2026-11") == month_rows(reference.con, "2026-11")
    check_weeks_add_up(closed.con)


def test_a_late_file_in_a_closed_month_is_reported_then_applied_after_reopen(
    unchanged: Fleet,
) -> None:
    late = fleet(f"not ({HELD_BACK})")
    close_month(late.con, late.config, "2026-10", today=TODAY)
    october = month_rows(late.con, "2026-10")
    arrive(late.con, HELD_BACK)
    result = build_models(late.con, late.config)
    assert result.mode == "incremental"
    assert len(result.kept) == 1 and "+" in result.kept[0]
    hours = float(result.kept[0].split("(")[1].split(" GPU-hours")[0].replace(",", ""))
    assert hours > 0
    assert month_rows(late.con, "2026-10") == october
    check_weeks_add_up(late.con)
    # allocation changes leave it too
    late.con.execute("update allocations set end_ts = end_ts + interval 2 hours")
    assert build_models(late.con, late.config).mode == "incremental"
    assert month_rows(late.con, "2026-10") == october
    late.con.execute("update allocations set end_ts = end_ts - interval 2 hours")
    # reopened, the next build applies everything, the late file and the allocations put
    # back: as if all had arrived at once (`unchanged`: the whole fleet, built)
    reopened = reopen_month(late.con, late.config, "2026-10", today=TODAY)
    assert reopened.recompute_from == dt.date(2026, 10, 1)
    result = build_models(late.con, late.config)
    assert result.mode == "incremental" and result.kept == ()
    for mart in (*DAY_MARTS, *RUN_MARTS, "team_weekly"):
        assert _mart(late.con, mart) == _mart(unchanged.con, mart), mart


@pytest.mark.parametrize(
    ("month", "problem"),
    [
        ("2026-13", "'2026-13' is not a month like 2026-11"),
        ("Oct 2026", "'Oct 2026' is not a month like 2026-11"),
        ("2026-12", "2026-12 is in the future"),
        ("2026-10\n", "'2026-10\\n' is not a month like 2026-11"),
        ("\uff12\uff10\uff12\uff16-10", "is not a month like 2026-11"),  # full-width digits
        ("9999-12", "'9999-12' is not a month like 2026-11"),
    ],
)
def test_a_bad_month_is_one_clear_error(unchanged: Fleet, month: str, problem: str) -> None:
    for step in (close_month, reopen_month):
        with pytest.raises(GpufleetError, match=re.escape(problem)):
            step(unchanged.con, unchanged.config, month, today=TODAY)
    assert unchanged.con.execute("select count(*) from closed_periods").fetchall() == [(0,)]


def test_closing_twice_or_reopening_an_open_month_is_an_error() -> None:
    built = fleet()
    with pytest.raises(GpufleetError, match="2026-11 is not over yet: it ends 2026-12-01"):
        close_month(built.con, built.config, "2026-11", today=TODAY)
    with pytest.raises(GpufleetError, match="2026-10 is not closed"):
        reopen_month(built.con, built.config, "2026-10", today=TODAY)
    close_month(built.con, built.config, "2026-10", today=TODAY)
    with pytest.raises(GpufleetError, match="2026-10 is closed already"):
        close_month(built.con, built.config, "2026-10", today=TODAY)


def test_a_site_that_is_no_site_name_or_has_no_samples_is_one_clear_error(
    unchanged: Fleet,
) -> None:
    built = unchanged
    with pytest.raises(GpufleetError, match="cluster '' is not a site name"):
        close_month(built.con, built.config, "2026-10", cluster="", today=TODAY)
    with pytest.raises(GpufleetError, match="cluster '' is not a site name"):
        reopen_month(built.con, built.config, "2026-10", cluster="", today=TODAY)
    with pytest.raises(GpufleetError, match="no samples of site 'typo' in the warehouse"):
        close_month(built.con, built.config, "2026-10", cluster="typo", today=TODAY)
    assert built.con.execute("select count(*) from closed_periods").fetchall() == [(0,)]


def _warehouse(tmp_path: Path) -> Any:
    """The moved fleet in a data directory's warehouse, built: a copy of one built once per
    test process (tests/templates.py)."""
    config = replace(_fleet().config, data_dir=tmp_path)

    def fill(folder: Path) -> None:
        made = replace(config, data_dir=folder)
        with write_transaction(made) as con:
            con.register("source", _source())
            _references(con)
            shift_back(con)
            arrive(con)
            build_models(con, made)

    made_once("test_close._warehouse", fill, tmp_path)
    return config


def test_a_price_change_mid_week_leaves_the_closed_showback_and_marts(tmp_path: Path) -> None:
    config = _warehouse(tmp_path)
    october = showback(config, "2026-10")
    november = showback(config, "2026-11")
    assert october.height > 0
    close(config, "2026-10", today=TODAY)
    with write_transaction(config) as con:
        before = month_rows(con, "2026-10")
        # the H100 price goes from 2.5 to 4.0 on Saturday 2026-10-31 (week 2026-W44)
        con.execute(
            "insert into ref_prices_dated (rule_order, gpu_glob, usd_per_gpu_hour, valid_from)"
            " values (4, '*H100*', 4.0, date '2026-10-31')"
        )
        result = build_models(con, config)
        assert result.mode == "incremental" and len(result.kept) == 1
        assert month_rows(con, "2026-10") == before
        check_weeks_add_up(con)
    assert showback(config, "2026-10").equals(october)
    # the other slot, caught up from the publish log, holds the same rows
    for _ in range(2):
        with write_transaction(config) as con:
            assert month_rows(con, "2026-10") == before
            assert build_models(con, config).mode == "up to date"
    changed = showback(config, "2026-11")
    h100 = [row for row in changed.iter_rows(named=True) if "H100" in row["x_gpu_name"]]
    assert h100 and all(row["ListUnitPrice"] == pytest.approx(4.0) for row in h100)
    assert not changed.equals(november)


def test_the_commands_print_one_line_and_refuse_with_exit_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _warehouse(tmp_path)
    data = ["--data-dir", str(config.data_dir)]
    (config.data_dir / "gpufleet.toml").write_text(f'timezone = "{ZONE}"\n', encoding="utf-8")
    assert main(["close", "--month", "2026-10", *data]) == 0
    assert capsys.readouterr().out.startswith("closed 2026-10: ")
    assert main(["close", "--month", "2026-10", *data]) == 1
    error = capsys.readouterr().err
    assert error.startswith("gpufleet: error: 2026-10 is closed already") and error.count("\n") == 1
    assert main(["reopen", "--month", "2026-10", *data]) == 0
    assert "recomputes every GPU from 2026-10-01 on" in capsys.readouterr().out
    assert main(["reopen", "--month", "2026-10", *data]) == 1
    assert capsys.readouterr().err == "gpufleet: error: 2026-10 is not closed\n"
    assert main(["close", "--month", "2026-1", *data]) == 1
    assert "is not a month like" in capsys.readouterr().err


def test_a_month_closed_for_one_site_keeps_that_site_only(tmp_path: Path) -> None:
    """Hosts node-a* are site east, the others west; east closes October."""
    config = replace(_fleet().config, data_dir=tmp_path)
    with write_transaction(config) as con:
        con.register("source", _source())
        _references(con)
        shift_back(con)
        clustered = con.sql(
            "select *, case when host like 'node-a%' then 'east' else 'west' end as cluster"
            " from source"
        ).to_arrow_table()
        con.register("source", clustered)
        arrive(con)
        build_models(con, config)
    before = showback(config, "2026-10")
    assert set(before["x_cluster"]) == {"east", "west"}
    assert str(close(config, "2026-10", cluster="east", today=TODAY)).startswith(
        "closed 2026-10 for site east: "
    )
    site = "(from {} where cluster = '{}' and strftime(day, '%Y-%m') = '2026-10')"
    with write_transaction(config) as con:
        kept = {m: _mart(con, site.format(m, "east")) for m in DAY_MARTS}
        west = {m: _mart(con, site.format(m, "west")) for m in DAY_MARTS}
        # every H100 (of both sites) costs 4.0 from the 30th
        con.execute(
            "insert into ref_prices_dated (rule_order, gpu_glob, usd_per_gpu_hour, valid_from)"
            " values (4, '*H100*', 4.0, date '2026-10-30')"
        )
        result = build_models(con, config)
        assert result.kept and result.kept[0].startswith("closed 2026-10 (site east): ")
        assert "--cluster east" in result.kept[0]
        assert {m: _mart(con, site.format(m, "east")) for m in DAY_MARTS} == kept
        changed = {m: _mart(con, site.format(m, "west")) for m in DAY_MARTS}
        assert changed["team_daily"] != west["team_daily"]
        check_weeks_add_up(con)
        with pytest.raises(GpufleetError, match="2026-10 is closed already for site east"):
            close_month(con, config, "2026-10", cluster="east", today=TODAY)
        with pytest.raises(GpufleetError, match="2026-10 is not closed for site west"):
            reopen_month(con, config, "2026-10", cluster="west", today=TODAY)
    after = showback(config, "2026-10")
    assert after.filter(pl.col("x_cluster") == "east").equals(
        before.filter(pl.col("x_cluster") == "east")
    )
    west_rows = after.filter(pl.col("x_cluster") == "west")
    assert not west_rows.equals(before.filter(pl.col("x_cluster") == "west"))
    assert after.height == before.height
    # the whole month closes over it, east keeping what it kept; reopening east alone is
    # refused then, and reopening the month applies everything
    close(config, "2026-10", today=TODAY)
    # west's rows kept now are its marts' as they were: the same figures, a sum's last bit
    # aside (DuckDB adds in no fixed order)
    assert_frame_equal(showback(config, "2026-10"), after, rel_tol=1e-12, abs_tol=1e-12)
    with write_transaction(config) as con:
        with pytest.raises(GpufleetError, match="closed for every site: reopen it without"):
            reopen_month(con, config, "2026-10", cluster="east", today=TODAY)
        reopen_month(con, config, "2026-10", today=TODAY)
        assert con.execute("select count(*) from closed_periods").fetchone() == (0,)
        assert build_models(con, config).kept == ()
        assert {m: _mart(con, site.format(m, "east")) for m in DAY_MARTS} != kept
    assert not showback(config, "2026-10").equals(after)
