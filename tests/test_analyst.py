"""The analyst's side: `gpufleet.open(...)` marts as polars DataFrames, and `gpufleet query`."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

import gpufleet
from gpufleet.cli import main
from gpufleet.errors import GpufleetError
from tests import report_fixtures as fx
from tests.test_report_jobs import EVIL_ACCOUNT, add_job_efficiency, job, week_jobs


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    fx.make_warehouse(tmp_path)
    fx.write_config(tmp_path)
    return tmp_path


def _direct(data_dir: Path, sql: str, params: list[object] | None = None) -> list[tuple]:
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(sql, params or []).fetchall()


def test_marts_come_back_as_polars_frames_equal_to_the_tables(data_dir: Path) -> None:
    warehouse = gpufleet.open(data_dir)
    weekly = warehouse.team_weekly(fx.WEEK)
    assert isinstance(weekly, pl.DataFrame)
    expected = _direct(
        data_dir, "select * from team_weekly where iso_week = ? order by iso_week, team", [fx.WEEK]
    )
    assert weekly.rows() == expected and expected
    assert set(weekly["iso_week"]) == {fx.WEEK}
    assert (
        warehouse.team_weekly().height
        == _direct(data_dir, "select count(*) from team_weekly")[0][0]
    )

    evil = warehouse.team_daily(fx.WEEK, team=fx.EVIL_TEAM)
    assert evil.height > 0 and set(evil["team"]) == {fx.EVIL_TEAM}
    days = warehouse.team_daily(fx.WEEK)["day"]
    assert days.min() >= fx.MONDAY and days.max() <= fx.MONDAY + dt.timedelta(days=6)
    assert warehouse.team_daily(fx.PREVIOUS_WEEK)["day"].max() < fx.MONDAY


def test_episodes_and_events_of_a_week_are_those_that_overlap_it(data_dir: Path) -> None:
    warehouse = gpufleet.open(data_dir)
    start = dt.datetime.combine(fx.MONDAY, dt.time(), tzinfo=dt.UTC)
    end = start + dt.timedelta(days=7)
    for frame, table in (
        (warehouse.idle_episodes(fx.WEEK), "idle_episodes"),
        (warehouse.thermal_events(fx.WEEK), "thermal_events"),
    ):
        (count,) = _direct(
            data_dir,
            f"select count(*) from {table} where start_ts < ? and end_ts > ?",
            [end, start],
        )[0]
        assert frame.height == count > 0, table
    waste = warehouse.idle_episodes(fx.WEEK, waste_only=True)
    assert waste.height > 0 and waste["is_waste"].all()
    assert waste.height < warehouse.idle_episodes(fx.WEEK).height


def test_sql_takes_parameters_and_refuses_anything_but_one_read(data_dir: Path) -> None:
    warehouse = gpufleet.open(data_dir)
    frame = warehouse.sql(
        "select team from team_daily where team = $team limit 1", {"team": fx.EVIL_TEAM}
    )
    assert frame["team"].to_list() == [fx.EVIL_TEAM]
    with pytest.raises(GpufleetError, match="only statements that read"):
        warehouse.sql("delete from team_daily")
    with pytest.raises(GpufleetError, match="expected one SQL statement, got 2"):
        warehouse.sql("select 1; select 2")
    with pytest.raises(GpufleetError, match="not an ISO week"):
        warehouse.team_daily("2026-47")
    assert "team_daily" in warehouse.tables()["name"].to_list()


def _ids(frame: pl.DataFrame) -> list[str]:
    return sorted(set(frame["job_id"]))


def test_jobs_are_job_efficiency_rows_filtered_by_parameters(data_dir: Path) -> None:
    rows = week_jobs()
    add_job_efficiency(data_dir, rows)
    warehouse = gpufleet.open(data_dir)
    everything = warehouse.jobs()
    assert everything.height == len(rows)
    assert everything.rows() == _direct(
        data_dir, "select * from job_efficiency order by start_ts, job_id, gpu_name"
    )
    assert everything.columns[:3] == ["job_id", "gpu_name", "cluster"]

    # the week's jobs: those that ran in it (104 and 117 ended before it, 105 began after)
    week = warehouse.jobs(fx.WEEK)
    assert _ids(week) == sorted({str(row[0]) for row in rows} - {"104", "105", "117"})
    assert warehouse.jobs(since="2026-11-09", until="2026-11-16").rows() == week.rows()
    monday = dt.datetime(2026, 11, 9, tzinfo=dt.UTC)
    assert warehouse.jobs(since=monday.date(), until=monday + dt.timedelta(days=7)).rows() == (
        week.rows()
    )
    assert _ids(warehouse.jobs(until="2026-11-01")) == ["103"]  # began 40 days before
    assert _ids(warehouse.jobs(since="2026-11-16T00:00:00+00:00")) == ["103", "105"]

    assert _ids(warehouse.jobs(user=fx.EVIL_USER)) == ["101"]
    assert _ids(warehouse.jobs(team=fx.EVIL_TEAM, account=EVIL_ACCOUNT)) == ["101"]
    assert _ids(warehouse.jobs(state="failed")) == ["101"]
    assert _ids(warehouse.jobs(state=["RUNNING", "Failed"])) == ["101", "103"]
    assert warehouse.jobs(fx.WEEK, cluster="alpha", state="RUNNING")["job_id"].to_list() == ["103"]
    # a name is a value, never SQL
    assert warehouse.jobs(user="x' or '1'='1").is_empty()
    with pytest.raises(GpufleetError, match="not an ISO week"):
        warehouse.jobs("2026-47")
    with pytest.raises(GpufleetError, match="since: 'last week' is not an ISO-8601"):
        warehouse.jobs(since="last week")


def test_jobs_without_a_zone_are_in_the_configured_one(tmp_path: Path) -> None:
    fx.make_warehouse(tmp_path)
    fx.write_config(tmp_path)
    (tmp_path / "gpufleet.toml").write_text(
        f'timezone = "America/New_York"\ndata_dir = "{tmp_path}"\n', encoding="utf-8"
    )
    # ended at 03:00 UTC on 2026-11-09, 22:00 in New York the day before
    add_job_efficiency(tmp_path, [job("late", 1.0, 1.0, start=_utc(8, 20), end=_utc(9, 3))])
    warehouse = gpufleet.open(tmp_path)
    assert _ids(warehouse.jobs(since="2026-11-09T00:00:00Z")) == ["late"]
    assert warehouse.jobs(since="2026-11-09").is_empty()  # New York midnight: 05:00 UTC
    assert warehouse.jobs(since=dt.datetime(2026, 11, 9)).is_empty()
    assert _ids(warehouse.jobs(until=dt.date(2026, 11, 9))) == ["late"]


def _utc(day: int, hour: int) -> dt.datetime:
    return dt.datetime(2026, 11, day, hour, tzinfo=dt.UTC)


def test_open_names_a_missing_warehouse(tmp_path: Path) -> None:
    with pytest.raises(GpufleetError, match="no warehouse yet"):
        gpufleet.open(tmp_path)


def test_the_warehouse_is_not_held_open_between_calls(data_dir: Path) -> None:
    """A read-write open (what a writer needs) succeeds in another process while the
    analyst's object lives: the object holds no DuckDB handle between calls."""
    warehouse = gpufleet.open(data_dir)
    assert warehouse.team_weekly().height > 0
    code = (
        "import duckdb, sys\n"
        "con = duckdb.connect(sys.argv[1])\n"
        "con.execute('create table written_meanwhile as select 1 as a')\n"
        "con.close()\n"
        "print('ok')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code, str(data_dir / "warehouse.duckdb")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.stdout.strip() == "ok", completed.stderr
    assert warehouse.sql("select a from written_meanwhile")["a"].to_list() == [1]


# --- gpufleet query --------------------------------------------------------------------


def _query(data_dir: Path, *argv: str) -> int:
    return main(["--data-dir", str(data_dir), "query", *argv])


def test_query_prints_an_aligned_table_with_every_row(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _query(data_dir, "select team, gpu_hours from team_weekly order by team") == 0
    lines = capsys.readouterr().out.splitlines()
    rows = _direct(data_dir, "select team, gpu_hours from team_weekly order by team")
    assert lines[-1] == f"({len(rows)} rows)"
    table = [line for line in lines[:-1] if line.startswith("|")]
    assert len(table) == len(rows) + 1  # the header and every row, none elided
    assert len({len(line) for line in lines[:-1]}) == 1  # aligned: every line as wide
    assert all(str(team) in "\n".join(lines) for team, _ in rows)


def test_query_writes_csv_parquet_and_json_that_read_back(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = "select day, team, gpu_hours, waste_usd from team_daily order by day, team"
    expected = _direct(data_dir, sql)
    assert _query(data_dir, sql, "--csv", "-o", str(tmp_path / "out.csv")) == 0
    assert _query(data_dir, sql, "-o", str(tmp_path / "out.parquet")) == 0
    assert _query(data_dir, sql, "--json", "-o", str(tmp_path / "out.json")) == 0
    csv = pl.read_csv(tmp_path / "out.csv", try_parse_dates=True)
    assert csv.rows() == expected
    assert pl.read_parquet(tmp_path / "out.parquet").rows() == expected
    rows = json.loads((tmp_path / "out.json").read_text())
    assert [(r["day"], r["team"], r["waste_usd"]) for r in rows] == [
        (day.isoformat(), team, waste) for day, team, _, waste in expected
    ]
    capsys.readouterr()
    assert _query(data_dir, "select 1 as a", "--csv") == 0
    assert capsys.readouterr().out == "a\n1\n"


# Each text cell a spreadsheet would run as a formula (OWASP's list: = + - @, tab, carriage
# return), a text cell that merely looks like a negative number, and real numbers.
FORMULA_SQL = (
    "select '=HYPERLINK(\"http://x\",\"y\")' as link, '+cmd|'' /C calc''!A0' as plus,"
    " '-2+3' as minus, '@SUM(A1:A9)' as at, chr(9) || '=1' as tab, chr(13) || '=1' as cr,"
    " 'fine=1' as fine, '-5' as text_number, -5 as number, -1.5 as real, null::varchar as nothing"
)


def test_query_csv_writes_formula_cells_as_text_and_keeps_numbers(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _query(data_dir, FORMULA_SQL, "--csv") == 0
    stdout = capsys.readouterr().out
    assert _query(data_dir, FORMULA_SQL, "--csv", "-o", str(tmp_path / "out.csv")) == 0
    assert (tmp_path / "out.csv").read_bytes().decode() == stdout
    back = pl.read_csv(tmp_path / "out.csv", infer_schema=False).row(0, named=True)
    assert back == {
        "link": '\'=HYPERLINK("http://x","y")',
        "plus": "'+cmd|' /C calc'!A0",
        "minus": "'-2+3",
        "at": "'@SUM(A1:A9)",
        "tab": "'\t=1",
        "cr": "'\r=1",
        "fine": "fine=1",
        "text_number": "'-5",
        "number": "-5",
        "real": "-1.5",
        "nothing": None,
    }

    # JSON and Parquet keep every value exact
    expected = _direct(data_dir, FORMULA_SQL)
    assert _query(data_dir, FORMULA_SQL, "-o", str(tmp_path / "out.parquet")) == 0
    assert pl.read_parquet(tmp_path / "out.parquet").rows() == [
        tuple(float(v) if k == 9 else v for k, v in enumerate(expected[0]))
    ]
    assert _query(data_dir, FORMULA_SQL, "--json", "-o", str(tmp_path / "out.json")) == 0
    (row,) = json.loads((tmp_path / "out.json").read_text())
    assert row["link"] == '=HYPERLINK("http://x","y")' and row["cr"] == "\r=1"
    assert row["number"] == -5


def test_query_csv_header_names_are_defused_too(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a pivot makes columns of values: a team named like a formula becomes a header
    assert _query(data_dir, 'select 1 as "=1+1", 2 as "ok"', "--csv") == 0
    assert capsys.readouterr().out == "'=1+1,ok\n1,2\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["create table x (a int)"], "only statements that read are allowed"),
        (["select 1; select 2"], "expected one SQL statement, got 2"),
        (["select * from no_such_table"], "query: Catalog Error"),
        (["select 1", "--parquet"], "--parquet needs -o FILE"),
        (["select 1", "-o", "out.xlsx"], "cannot tell the format"),
    ],
)
def test_query_errors_are_one_line(
    data_dir: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _query(data_dir, *argv) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("gpufleet: error: ")


def test_query_leaves_the_warehouse_unchanged(data_dir: Path) -> None:
    before = _direct(data_dir, "select count(*) from team_daily")
    assert _query(data_dir, "delete from team_daily") == 1
    assert _direct(data_dir, "select count(*) from team_daily") == before
