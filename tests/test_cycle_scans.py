"""A steady cycle reads what it changed, not the retained history (issue #60 item 2).

Each test counts the rows DuckDB reads in a step (`tests/scans.py`: its profile, after the
zone maps skipped what they could) on tables long enough to span several row groups, the
older days first as builds leave them, and asserts that the step read the recent row
groups only. No timing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config, RetentionConfig
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base import deletes
from gpufleet.warehouse.base.deletes import ROW_GROUP_ROWS, delete_in_key_ranges
from gpufleet.warehouse.build.data_tests import (
    DataTest,
    parse_data_tests,
    replaced_rows,
    run_data_tests,
)
from gpufleet.warehouse.build.incremental.marts import _create_extra_days, log_replaced
from gpufleet.warehouse.build.incremental.pieces import replace_runs
from gpufleet.warehouse.build.incremental.run import build_incrementally
from gpufleet.warehouse.build.kept import ensure_kept_tables, keep_days, restore_kept
from gpufleet.warehouse.build.models import Model, build_order, discover_models, prepare
from gpufleet.warehouse.build.retention import expire_samples
from gpufleet.warehouse.build.run import build
from gpufleet.warehouse.build.state import (
    read_state,
    record_allocations,
    samples_load_top,
)
from gpufleet.warehouse.publish import connect_read_only, write_transaction
from gpufleet.warehouse.publish.catch_up import catch_up
from gpufleet.warehouse.publish.log import GENERATION_DDL, current_generation
from tests.scans import ScanCounter
from tests.templates import made_once
from tests.test_data_tests import _add_idle_samples, _built_full
from tests.test_warehouse import stale_slot, tables_written

pytestmark = pytest.mark.fleet

GPUS, DAYS = 100, 200  # gpu_hourly: 480,000 rows, about four row groups, day by day
HOURLY_ROWS = GPUS * DAYS * 24
LAST_DAY = "2026-11-28"


def _catch_up_reads(config: Config, tmp_path: Path, table: str) -> tuple[int, int]:
    """The stale slot caught up (its `table` then the published one's): the rows its
    catch-up read of `table` in the published slot, and in its own."""
    con = duckdb.connect(str(stale_slot(config)))
    try:
        counter = ScanCounter(con, tmp_path / "profile.json")
        assert catch_up(counter, config.warehouse_path, rebuild=False)  # type: ignore[arg-type]
        published = counter.read(f"_published.main.{table}")
        own = counter.read(f"main.{table}") - published
        # compared as Arrow tables: a Python tuple a row took seconds on a million rows
        caught_up = con.sql(f"select * from {table} order by all").to_arrow_table()
    finally:
        con.close()
    with connect_read_only(config) as reader:
        expected = reader.sql(f"select * from {table} order by all").to_arrow_table()
    assert caught_up.equals(expected), f"the caught-up {table} differs from the published one"
    return published, own


def test_catching_up_reads_the_hours_replaced_not_the_whole_table(
    config: Config, tmp_path: Path
) -> None:
    """An incremental build replaces each GPU's rows of gpu_hourly from an hour on
    (`gpu_from_hour`); the other slot replays that reading the row groups of those days
    only, on its own side and the published one."""
    with write_transaction(config) as con:
        con.execute(
            f"""
            create table gpu_hourly as
            select 'GPU-' || g as gpu_uuid, date '{LAST_DAY}' - ({DAYS} - 1 - d)::integer as day,
                h as hour, 1.0 as gpu_hours,
            from range({DAYS}) as ds(d), range(24) as hs(h), range({GPUS}) as gs(g)
            order by day, hour, gpu_uuid
            """
        )
    with write_transaction(config):
        pass  # both slots exist now: the next write catches the other one up in place
    with write_transaction(config) as con:
        con.execute(
            f"""
            delete from gpu_hourly
            where gpu_uuid = 'GPU-7' and day = date '{LAST_DAY}' and hour >= 10;
            insert into gpu_hourly
            select 'GPU-7', date '{LAST_DAY}', h, 2.0, from range(10, 24) as hs(h);
            """
        )
        log_replaced(
            con,
            "gpu_hourly",
            "gpu_from_hour",
            f"select 'GPU-7' as gpu_uuid, date '{LAST_DAY}' as day, 10 as hour",
        )
    published, own = _catch_up_reads(config, tmp_path, "gpu_hourly")
    assert 0 < published < HOURLY_ROWS / 3, published
    assert 0 < own < HOURLY_ROWS / 3, own


def _series_rows(con: duckdb.DuckDBPyConnection, start: str = "2026-11-01 00:00") -> int:
    """A table in series order, as a full build writes samples_attributed_rows: 8 row groups
    of 100 series' 27 hours from `start` (UTC), then each series' newest minute appended as
    a cycle does."""
    con.execute(
        f"""
        create table samples_attributed_rows as
        select s as series_id, timestamptz '{start}+00' + to_seconds(k * 10) as ts,
        from range(100) as ss(s), range({8 * ROW_GROUP_ROWS // 100}) as ks(k)
        order by series_id, ts;
        insert into samples_attributed_rows
        select s, timestamptz '2026-12-01' + to_seconds(k * 10), from range(100) as ss(s),
            range(6) as ks(k);
        """
    )
    ((rows,),) = con.execute("select count(*) from samples_attributed_rows").fetchall()
    return int(rows)


def test_a_delete_of_each_series_newest_rows_is_one_statement_however_large_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cycle replaces each series' newest rows, in the row groups appended last: one
    statement, not one statement and checkpoint per range of series (their number grows
    with the table, that is with the retained days). A delete from every row group (the
    oldest day expiring) still goes a range at a time."""
    monkeypatch.setattr(deletes, "BATCH_ROWS", 2 * ROW_GROUP_ROWS)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    counter = ScanCounter(con, tmp_path / "profile.json")
    rows = _series_rows(con)
    newest = delete_in_key_ranges(
        counter,  # type: ignore[arg-type]
        "samples_attributed_rows as rows",
        "rows.ts >= ?",
        [dt.datetime(2026, 12, 1, tzinfo=dt.UTC)],
        key="rows.series_id",
    )
    assert newest == 600
    assert [s for s in counter.statements if s.startswith(("delete", "checkpoint"))] == [
        "delete from samples_attributed_rows as rows where (rows.ts >= ?)"
    ]
    counter.statements.clear()
    oldest = delete_in_key_ranges(
        counter,  # type: ignore[arg-type]
        "samples_attributed_rows",
        "ts < ?",
        [dt.datetime(2026, 11, 1, 1, tzinfo=dt.UTC)],
        key="series_id",
    )
    assert oldest == 100 * 360
    assert sum(s.startswith("checkpoint") for s in counter.statements) > 1
    ((left,),) = con.execute("select count(*) from samples_attributed_rows").fetchall()
    assert left == rows - newest - oldest


def _hourly(con: duckdb.DuckDBPyConnection) -> None:
    """gpu_hourly of DAYS days, day by day, and a log of GPU-7's hours from 10:00 of the
    last day replaced by the build of this publish (build_state.replaced)."""
    con.execute(GENERATION_DDL)
    con.execute(
        f"""
        create table gpu_hourly as
        select 'GPU-' || g as gpu_uuid, date '{LAST_DAY}' - ({DAYS} - 1 - d)::integer as day,
            h as hour, 'ml' as team,
        from range({DAYS}) as ds(d), range(24) as hs(h), range({GPUS}) as gs(g)
        order by day, hour, gpu_uuid
        """
    )
    log_replaced(
        con,
        "gpu_hourly",
        "gpu_from_hour",
        f"select 'GPU-7' as gpu_uuid, date '{LAST_DAY}' as day, 10 as hour",
    )


def test_an_incremental_builds_data_tests_read_the_rows_it_replaced(tmp_path: Path) -> None:
    """After an incremental build, the data tests read the rows it logged as replaced (and a
    repeat of their keys or a bad value there still fails); a `unique` test whose columns
    leave out a logged key's reads the whole table."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    counter = ScanCounter(con, tmp_path / "profile.json")
    _hourly(con)
    source = tmp_path / "_docs.toml"
    tests = [
        *parse_data_tests("gpu_hourly", [{"unique": ["day", "hour", "gpu_uuid"]}], source),
        *parse_data_tests("gpu_hourly", [{"not_null": "team"}], source),
    ]
    generation = current_generation(con)

    def check(tests: list[DataTest]) -> int:
        counter.rows.clear()
        replaced = {"gpu_hourly": replaced_rows(counter, "gpu_hourly", generation)}  # type: ignore[arg-type]
        run_data_tests(counter, tests, replaced)  # type: ignore[arg-type]
        return counter.read("main.gpu_hourly")

    assert 0 < check(tests) < HOURLY_ROWS / 3
    wide = parse_data_tests("gpu_hourly", [{"unique": ["day", "hour", "team"]}], source)
    with pytest.raises(GpufleetError, match=r"unique\(day, hour, team\)"):
        check(wide)  # every GPU's hours repeat (day, hour, team): the whole table is read
    assert counter.read("main.gpu_hourly") >= HOURLY_ROWS
    con.execute(
        f"insert into gpu_hourly values ('GPU-7', date '{LAST_DAY}', 12, 'ml')"
    )  # a repeat of a replaced row
    with pytest.raises(GpufleetError, match=r"gpu_hourly: unique\(day, hour, gpu_uuid\)"):
        check(tests)
    con.execute("update gpu_hourly set team = null where gpu_uuid = 'GPU-7' and hour = 23")
    with pytest.raises(GpufleetError, match=r"not_null\(team\): 1 rows"):
        check(tests[1:])  # of GPU-7's hours 23, the last day's is replaced: tested


def test_an_incremental_build_leaves_the_views_over_several_marts_uncounted(
    config: Config,
) -> None:
    """Counting job_efficiency (a view over gpu_hourly, run_pieces and idle_episodes) runs
    it over every retained day: a full build's result counts it, an incremental one's (a
    steady cycle's) does not; the marts and the views over one table it counts as ever."""
    _add_idle_samples(config, "GPU-A", 1)
    full = build(config)
    _add_idle_samples(config, "GPU-B", 2)
    incremental = build(config)
    assert (full.mode, incremental.mode) == ("full", "incremental")
    assert "job_efficiency" in full.mart_rows
    assert set(full.mart_rows) - set(incremental.mart_rows) == {"job_efficiency"}
    assert incremental.mart_rows["samples_attributed"] == 12


RUNS = 10 * ROW_GROUP_ROWS  # idle_episodes: an episode a GPU-hour, ten row groups


def _episodes(con: duckdb.DuckDBPyConnection) -> None:
    """idle_episodes in order of their end, as a full build writes them (ORDERED_MARTS): an
    episode a GPU and hour up to the last day, ids hashed as the build's are."""
    con.execute(GENERATION_DDL)
    con.execute(
        f"""
        create table idle_episodes as
        select (hash(gpu_uuid, start_ts) >> 1)::bigint as episode_id, gpu_uuid, start_ts,
            start_ts + interval 50 minutes as end_ts, false as is_waste,
        from (
            select 'GPU-' || g as gpu_uuid,
                timestamptz '{LAST_DAY} 00:00:00+00' - to_hours(h) as start_ts,
            from range({RUNS // GPUS}) as hs(h), range({GPUS}) as gs(g)
        )
        order by end_ts, gpu_uuid
        """
    )


def _touch_last_episode(con: duckdb.DuckDBPyConnection) -> None:
    """_inc_touched_idle as an incremental build leaves it: GPU-7's last episode, which
    this build extends (the new row), with the bound on its end (ends_from_ts)."""
    con.execute(
        f"""
        create or replace temp table _inc_touched_idle as
        select gpu_uuid, start_ts as run_start_ts, episode_id as run_id,
            start_ts as ends_from_ts,
        from idle_episodes
        where gpu_uuid = 'GPU-7' and start_ts = timestamptz '{LAST_DAY} 00:00:00+00';
        create or replace temp table _inc_new_runs as
        select episode_id, gpu_uuid, start_ts, end_ts + interval 9 minutes as end_ts, true
            as is_waste,
        from idle_episodes
        semi join _inc_touched_idle on _inc_touched_idle.run_id = idle_episodes.episode_id
        """
    )


def test_the_runs_an_incremental_build_replaces_are_looked_up_by_their_end(
    tmp_path: Path,
) -> None:
    """A run's id is a hash (no zone map skips anything by it): the build looks up the runs
    it replaces (their waste before, the delete) and the data tests read them by the id and
    a bound on their end, reading the row groups of recent ends only; the same rows."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    _episodes(con)
    _touch_last_episode(con)
    model = Model(
        name="idle_episodes",
        layer="marts",
        path=tmp_path / "idle_episodes.sql",
        sql="select * from _inc_new_runs",
        materialized="table",
        reads=frozenset({"_inc_new_runs"}),
        depends_on=frozenset(),
    )
    counter = ScanCounter(con, tmp_path / "profile.json")
    replace_runs(counter, model, {})  # type: ignore[arg-type]
    assert 0 < counter.read("main.idle_episodes") < RUNS / 3
    counter.rows.clear()
    tests = parse_data_tests(
        "idle_episodes",
        [{"unique": ["gpu_uuid", "episode_id"]}, {"not_null": "end_ts"}],
        tmp_path / "_docs.toml",
    )
    replaced = {"idle_episodes": replaced_rows(counter, "idle_episodes", 0)}  # type: ignore[arg-type]
    run_data_tests(counter, tests, replaced)  # type: ignore[arg-type]
    counter.execute("select 1")  # the last statement's profile is written now
    assert 0 < counter.read("main.idle_episodes") < RUNS / 3
    ((touched,),) = con.execute("select run_id from _inc_touched_idle").fetchall()
    assert con.execute("select * from _inc_old_waste").fetchall() == [("GPU-7", touched, False)]
    ((rows, waste),) = con.execute(
        "select count(*), count(*) filter (where is_waste) from idle_episodes"
    ).fetchall()
    assert (rows, waste) == (RUNS, 1)


def test_catching_up_reads_the_runs_replaced_not_the_whole_table(
    config: Config, tmp_path: Path
) -> None:
    """The other slot replays the runs a build replaced by their ids and the bound on their
    end it logged: the row groups of recent ends only, on its side and the published one."""
    with write_transaction(config) as con:
        _episodes(con)
    with write_transaction(config):
        pass  # both slots exist now: the next write catches the other one up in place
    with write_transaction(config) as con:
        _touch_last_episode(con)
        con.execute(
            """
            delete from idle_episodes
            where episode_id in (select run_id from _inc_touched_idle);
            insert into idle_episodes select * from _inc_new_runs;
            """
        )
        log_replaced(
            con,
            "idle_episodes",
            "gpu_episode",
            "select gpu_uuid, run_id, ends_from_ts as since_ts from _inc_touched_idle",
        )
    published, own = _catch_up_reads(config, tmp_path, "idle_episodes")
    assert 0 < published < RUNS / 3, published
    assert 0 < own < RUNS / 3, own


def test_an_expiry_with_nothing_to_expire_reads_no_sample_row(
    config: Config, tmp_path: Path
) -> None:
    """Once a build has expired the samples before a day, the next builds' expiry deletes
    nothing from samples_attributed_rows unless they added rows before that day: it knows so
    from build_state (the cut expired, the publish's log) and reads none of the table (a
    delete would read every row group's `ts`: they keep the least `ts` of the rows deleted).
    A build that adds a row before the cut has it deleted."""
    retaining = dataclasses.replace(
        config, retention=RetentionConfig(samples_days=1, reports_weeks=0)
    )
    today = dt.date(2026, 11, 3)  # samples before 2026-11-02 go
    cut = dt.datetime(2026, 11, 2, tzinfo=dt.UTC)
    with write_transaction(config) as con:
        ensure_kept_tables(con)
        rows = _series_rows(con, "2026-11-01 22:40")  # 80 of each series' 1,638 minutes go
        expire_samples(con, retaining, today=today)
        ((left,),) = con.execute("select count(*) from samples_attributed_rows").fetchall()
    assert left == rows - 100 * 80 * 6
    with write_transaction(config) as con:
        counter = ScanCounter(con, tmp_path / "profile.json")
        expire_samples(counter, retaining, today=today)  # type: ignore[arg-type]
        counter.execute("select 1")  # the last statement's profile is written now
        assert counter.read("main.samples_attributed_rows") == 0
    with write_transaction(config) as con:
        con.execute(
            "insert into samples_attributed_rows values (7, ?)", [cut - dt.timedelta(hours=1)]
        )
        log_replaced(
            con,
            "samples_attributed_rows",
            "series_since_ts",
            f"select 7 as run_id, timestamptz '{cut - dt.timedelta(hours=1)}' as since_ts",
        )
        expire_samples(con, retaining, today=today)
        ((after,),) = con.execute("select count(*) from samples_attributed_rows").fetchall()
    assert after == left


def test_a_build_whose_allocations_are_those_recorded_rewrites_none_of_them(
    tmp_path: Path,
) -> None:
    """The allocations, job records and dated reference rows the marts were built with grow
    with the retained days: a build that found them as recorded writes none of them again;
    one whose allocations changed records them anew."""
    config = Config(data_dir=made_once("test_data_tests._built_full", _built_full, tmp_path))
    allocation = """
        insert into allocations by name
        select 'GPU-A' as gpu_uuid, 'job-1' as job_id, 'ana' as "user", 'vision' as team,
            'host-a' as host, 0 as gpu_index, timestamptz '2026-11-02 08:00+00' as start_ts,
            {end} as end_ts, 'raw/allocations/a.csv' as source_file
    """
    with write_transaction(config) as con:
        con.execute(allocation.format(end="null"))
        record_allocations(con)
        counter = ScanCounter(con, tmp_path / "profile.json")
        record_allocations(counter)  # type: ignore[arg-type]
        assert tables_written(counter.statements) == set()
        con.execute("delete from allocations")
        con.execute(allocation.format(end="timestamptz '2026-11-02 09:00+00'"))
        counter.statements.clear()
        record_allocations(counter)  # type: ignore[arg-type]
        assert tables_written(counter.statements) == {"build_state.allocations_built"}
        ((recorded,),) = con.execute(
            "select list(end_ts) from build_state.allocations_built"
        ).fetchall()
    assert recorded == [dt.datetime(2026, 11, 2, 9, tzinfo=dt.UTC)]


FILLER = 4 * ROW_GROUP_ROWS  # rows of days long past, four row groups a table


def _with_history(data_dir: Path) -> None:
    """GPU-A's idle episode of 2026-11-16 built in full (`_built_full`), under a long
    history written as builds leave it, the oldest rows first: FILLER idle episodes in 2025,
    and FILLER kept episodes of those days (retention expired the days before 2026-01-01:
    kept tables for every mart)."""
    _built_full(data_dir)
    config = Config(data_dir=data_dir)
    with write_transaction(config) as con:
        prepare(con, config)  # the macros and variables keep_days reads with
        ensure_kept_tables(con)
        con.execute("insert into build_state.retention values ('2026-01-01', '2026-01-01')")
        keep_days(con, "{day} < $before", {"before": dt.date(2000, 1, 1)})  # the kept tables
        history = f"""
            -- names on either side of GPU-A's: each row group spans it, as a fleet's do
            select ['GPU-0', 'GPU-Z'][k % 2 + 1] || (k % {GPUS}) as gpu_uuid,
                timestamptz '2025-01-01 00:00:00+00' + to_minutes(k // {GPUS}) as start_ts,
                k,
            from range({FILLER}) as ks(k)
        """
        for table in ("idle_episodes", "build_state.kept_idle_episodes"):
            con.execute(
                f"""
                create or replace table {table} as
                select * from (
                    from {table}
                    union all by name
                    select (hash(gpu_uuid, start_ts) >> 1)::bigint as episode_id, gpu_uuid,
                        start_ts, start_ts + interval 50 seconds as end_ts,
                        k % 2 = 0 as is_waste,
                    from ({history})
                )
                order by end_ts
                """
            )


def _incremental_reads(tmp_path: Path) -> ScanCounter:
    """`_with_history`'s warehouse given six more idle samples of GPU-A (its episode goes
    on) and built incrementally, the kept rows restored after (`build_models`' steps): the
    rows each statement read, by table."""
    config = Config(data_dir=made_once("test_cycle_scans._with_history", _with_history, tmp_path))
    with write_transaction(config) as con:
        con.execute(
            """
            insert into samples_stored (ts, interval_s, host, gpu_index, gpu_uuid, gpu_name,
                                        status, gpu_util_pct, processes, load_id)
            select timestamptz '2026-11-16 10:01:00+00' + to_seconds(10 * k), 10, 'node1', 0,
                   'GPU-A', 'NVIDIA H100 80GB HBM3', 'ok', 0,
                   [{'pid': 1, 'user': 'alice', 'used_mem_bytes': 1, 'job_id': 'j1'}], 2
            from range(6) as r(k)
            """
        )
        models = discover_models()
        prepare(con, config)
        state = read_state(con)
        assert state is not None
        counter = ScanCounter(con, tmp_path / "profile.json")
        outcome = build_incrementally(
            counter,  # type: ignore[arg-type]
            config,
            models,
            build_order(models),
            after=state.samples_load_id,
            top=samples_load_top(con),
        )
        assert not isinstance(outcome, str), outcome
        restore_kept(counter, models, full=False)  # type: ignore[arg-type]
        counter.execute("select 1")  # the last statement's profile is written now
        ((samples, days),) = con.execute(
            """
            select (select samples from idle_episodes where gpu_uuid = 'GPU-A'),
                (select count(*) from gpu_team_daily where gpu_uuid = 'GPU-A')
            """
        ).fetchall()
    assert (samples, days) == (12, 1)  # the episode went on
    return counter


def test_the_kept_runs_are_looked_up_by_their_end(tmp_path: Path) -> None:
    """The kept rows of the runs an incremental build touched (their end bounds the build's
    ends_from_ts; their rows are compared with the build's after it) are read by the run's id
    and a bound on their end: the kept table's row groups of runs that ended long ago are
    skipped, as the mart's are."""
    counter = _incremental_reads(tmp_path)
    assert counter.read("build_state.kept_idle_episodes") < FILLER / 4


def test_gpu_team_daily_reads_the_episodes_that_end_on_its_days(tmp_path: Path) -> None:
    """gpu_team_daily joins the idle episodes of the days it recomputes: an episode ends at
    or after each of its days' first sample, so the episodes that ended before are not
    read."""
    counter = _incremental_reads(tmp_path)
    assert counter.read("main.idle_episodes") < FILLER / 2


def test_the_earlier_days_of_runs_whose_waste_changed_read_those_runs_pieces_only(
    tmp_path: Path,
) -> None:
    """gpu_team_daily recomputes the days before the cut of the touched idle runs whose
    waste verdict changed: those runs are found first, then their pieces. Every touched
    run's pieces are not read: 25 GPUs of 250 idle since the first day have pieces on
    every day, in every row group. The same days."""
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    first = "timestamptz '2025-01-01 00:00:00+00'"
    start = f"(timestamptz '{LAST_DAY} 00:00:00+00' - interval 2 days)"  # GPU-50's last run
    con.execute(
        f"""
        create table run_pieces as
        select 'GPU-' || g as gpu_uuid, day,
            case
                when g = 50 and day >= {start}::date then {start}
                when g < 25 then {first}  -- idle since the first day
                else timezone('UTC', day + to_seconds(k % 1000))  -- short runs
            end as idle_run_start_ts,
        from (
            select k, k % 250 as g, date '2025-01-01' + (k // 1000)::integer as day,
            from range({FILLER}) as ks(k)
            union all
            select 0, 50, ({start} + to_days(d))::date, from range(3) as ds(d)
        )
        order by day;
        create temp table _inc_touched_idle as  -- each GPU's runs of its last three days
        select distinct gpu_uuid, idle_run_start_ts as run_start_ts,
            (hash(gpu_uuid, idle_run_start_ts) >> 1)::bigint as run_id,
            idle_run_start_ts as ends_from_ts,
        from run_pieces
        where day >= (select max(day) - 2 from run_pieces where gpu_uuid <> 'GPU-50')
            or gpu_uuid = 'GPU-50' and day >= {start}::date;
        create table idle_episodes as
        select * from (
            select k as episode_id, 'GPU-' || (k % 250) as gpu_uuid,
                timestamptz '{LAST_DAY} 00:00:00+00' - to_seconds(k) as end_ts, k % 2 = 0
                as is_waste,
            from range({FILLER}) as ks(k)
            union all
            select run_id, gpu_uuid, timestamptz '{LAST_DAY} 12:00:00+00', false,
            from _inc_touched_idle
        )
        order by end_ts;
        create temp table _inc_old_waste as
        select gpu_uuid, run_id, false as is_waste, from _inc_touched_idle;
        create temp table _inc_cut as
        select distinct gpu_uuid, date '{LAST_DAY}' as from_day, 10 as from_hour,
        from _inc_touched_idle;
        """
    )
    counter = ScanCounter(con, tmp_path / "profile.json")
    _create_extra_days(counter)  # type: ignore[arg-type]
    counter.execute("select 1")  # the last statement's profile is written now
    assert counter.read("main.run_pieces") < FILLER / 4
    assert con.execute("select * from _inc_extra_days").fetchall() == []
    con.execute(  # GPU-50's last run became waste
        f"update idle_episodes set is_waste = true where episode_id = hash('GPU-50', {start}) >> 1"
    )
    counter.rows.clear()
    _create_extra_days(counter)  # type: ignore[arg-type]
    counter.execute("select 1")  # the last statement's profile is written now
    assert counter.read("main.run_pieces") < FILLER / 4
    days = con.execute("select gpu_uuid, day from _inc_extra_days order by day").fetchall()
    assert days == [("GPU-50", dt.date(2026, 11, 26)), ("GPU-50", dt.date(2026, 11, 27))]
