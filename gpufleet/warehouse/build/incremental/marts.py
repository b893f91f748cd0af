"""How an incremental build replaces each mart's rows, logging what it replaced.

Per-sample rows from each series' `since_ts`, hourly rows from its cut, `gpu_team_daily`
from its day, the daily and weekly marts for the days (weeks) that changed; runs are in
`pieces.py`. Each replacement is logged for the other slot (`publish/log.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

import duckdb

from gpufleet.warehouse.base.deletes import delete_in_key_ranges
from gpufleet.warehouse.build.incremental.window import from_cut
from gpufleet.warehouse.build.models import Model, render
from gpufleet.warehouse.publish.log import current_generation

# How the incremental build replaces each mart's rows; any other mart means a full build.
PER_SAMPLE_MART = "samples_attributed_rows"
PIECES_MART = "run_pieces"
PIECES_MODEL = "int_run_pieces"  # what run_pieces keeps, and the runs' intermediates read
RUN_MARTS = ("idle_episodes", "thermal_events")
GPU_DAY_MART = "gpu_team_daily"
GPU_HOUR_MART = "gpu_hourly"
PER_DAY_MARTS = ("team_daily", "gpu_daily", "host_daily")
PER_WEEK_MARTS = ("team_weekly",)
# Recomputed whole by every build (small); the days whose rows changed are recomputed in the
# daily and weekly marts, which add them up.
ALLOC_ONLY_MART = "alloc_only_daily"


def log_replaced(con: duckdb.DuckDBPyConnection, table: str, key: str, keys_sql: str) -> None:
    """Log which rows of `table` this build replaced, for the other warehouse slot to
    replace the same way when it catches up (gpufleet/warehouse/publish/log.py, REPLAY_KEYS)."""
    con.execute(
        f"""
        insert into build_state.replaced by name
        select ? as generation, ? as table_name, ? as key, keys.*,
        from ({keys_sql}) as keys
        """,
        [current_generation(con), table, key],
    )


def replace_sample_rows(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]
) -> None:
    """samples_attributed_rows: the rows from each series' since_ts on, the context row
    left out (by series id: the series' ids are those it already has, `build/ids.py`)."""
    con.execute(f"create or replace temp table _inc_attributed as\n{render(model, remap)}")
    con.execute(
        """
        create or replace temp table _inc_series_ids as
        select int_series_ids.series_id, _inc_series.*,
        from _inc_series
        inner join int_series_ids on int_series_ids.gpu_uuid = _inc_series.gpu_uuid
        """
    )
    # each series' newest rows: a statement per range of series (base/deletes.py)
    delete_in_key_ranges(
        con,
        model.name,
        f"""
        {model.name}.series_id = _inc_series_ids.series_id
            and {model.name}.ts >= _inc_series_ids.since_ts
            and {model.name}.ts >= (select min(since_ts) from _inc_series_ids)
        """,
        key=f"{model.name}.series_id",
        using="_inc_series_ids",
    )
    log_replaced(
        con,
        model.name,
        "series_since_ts",
        "select series_id as run_id, since_ts from _inc_series_ids",
    )
    con.execute(
        f"""
        insert into {model.name} by name
        select _inc_attributed.*,
        from _inc_attributed
        inner join _inc_series_ids on _inc_series_ids.series_id = _inc_attributed.series_id
        where _inc_attributed.ts >= _inc_series_ids.since_ts
        """
    )


def replace_from_cut(con: duckdb.DuckDBPyConnection, table: str, rows_sql: str) -> None:
    """Replace each series' rows of `table` from its cut on with `rows_sql`'s."""
    con.execute(
        f"""
        delete from {table} using _inc_cut
        where {table}.gpu_uuid = _inc_cut.gpu_uuid and {from_cut(table)}
            and {table}.day >= (select min(from_day) from _inc_cut)
        """
    )
    con.execute(f"insert into {table} by name\n{rows_sql}")
    log_replaced(
        con,
        table,
        "gpu_from_hour",
        "select gpu_uuid, from_day as day, from_hour as hour from _inc_cut",
    )


def replace_gpu_hours(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]
) -> None:
    """gpu_hourly: each series' rows from its cut on, from the window."""
    replace_from_cut(con, model.name, render(model, remap))


def replace_gpu_days(
    con: duckdb.DuckDBPyConnection,
    model: Model,
    models: Mapping[str, Model],
    remap: Mapping[str, str],
) -> None:
    """gpu_team_daily: each series' days from from_day on, and the earlier days of episodes
    that became waste (or stopped being waste) in this build."""
    _create_extra_days(con)
    _create_gpu_day_sources(con, models)
    in_scope = f"""
        from {model.name}
        where exists (
            select 1 from _inc_cut
            where _inc_cut.gpu_uuid = {model.name}.gpu_uuid
                and {model.name}.day >= _inc_cut.from_day
        ) or exists (
            select 1 from _inc_extra_days
            where _inc_extra_days.gpu_uuid = {model.name}.gpu_uuid
                and _inc_extra_days.day = {model.name}.day
        )
    """
    con.execute(f"insert into _inc_days select distinct day {in_scope}")
    con.execute(f"delete {in_scope}")
    sql = render(
        model,
        {
            **remap,
            GPU_HOUR_MART: "_inc_gpu_day_hours",
            "int_idle_episode_days": "_inc_gpu_day_episode_days",
            "idle_episodes": "_inc_gpu_day_episodes",
        },
    )
    con.execute(f"insert into {model.name} by name\n{sql}")
    con.execute("drop table temp._inc_gpu_day_episodes")
    con.execute(f"insert into _inc_days select distinct day {in_scope}")
    log_replaced(con, model.name, "gpu_from_day", "select gpu_uuid, from_day as day from _inc_cut")
    log_replaced(con, model.name, "gpu_day", "select gpu_uuid, day from _inc_extra_days")
    con.execute(
        """
        create or replace temp table _inc_weeks as
        select distinct iso_week(day) as iso_week from _inc_days;
        """
    )


def _create_extra_days(con: duckdb.DuckDBPyConnection) -> None:
    """_inc_extra_days: the days before a series' cut of idle episodes touched in this build
    whose waste verdict changed. Those runs are found first (few; in most builds none), then
    their pieces alone: every touched run's were read before, which for a run open since
    long ago (an idle GPU) are on every day of run_pieces."""
    con.execute(
        """
        create or replace temp table _inc_waste_changed as
        select _inc_touched_idle.gpu_uuid, _inc_touched_idle.run_start_ts,
        from _inc_touched_idle
        left join _inc_old_waste
            on _inc_old_waste.gpu_uuid = _inc_touched_idle.gpu_uuid
            and _inc_old_waste.run_id = _inc_touched_idle.run_id
        left join (
            select * from idle_episodes
            where end_ts >= (select min(ends_from_ts) from _inc_touched_idle)
        ) as idle_episodes
            on idle_episodes.gpu_uuid = _inc_touched_idle.gpu_uuid
            and idle_episodes.episode_id = _inc_touched_idle.run_id
            and idle_episodes.end_ts >= _inc_touched_idle.ends_from_ts
        where coalesce(_inc_old_waste.is_waste, false)
            <> coalesce(idle_episodes.is_waste, false)
        """
    )
    con.execute(
        f"""
        create or replace temp table _inc_extra_days as
        select distinct pieces.gpu_uuid, pieces.day,
        from {PIECES_MART} as pieces
        inner join _inc_waste_changed as changed
            on changed.gpu_uuid = pieces.gpu_uuid
            and changed.run_start_ts = pieces.idle_run_start_ts
        inner join _inc_cut on _inc_cut.gpu_uuid = pieces.gpu_uuid
        where pieces.day < _inc_cut.from_day
        """
    )
    con.execute("drop table temp._inc_waste_changed")


def _create_gpu_day_sources(con: duckdb.DuckDBPyConnection, models: Mapping[str, Model]) -> None:
    """What gpu_team_daily reads for the days it recomputes: their hours, their pieces, the
    idle episodes' days from those pieces and those episodes. An episode ends at or after
    the first sample of each of its days: the episodes are looked up by that bound, which
    skips the row groups of idle_episodes that ended before (a full build writes it in end
    order). The model's join of the whole mart read it all: DuckDB built its hash table
    from idle_episodes, where no bound reaches."""
    for source, view in (
        (GPU_HOUR_MART, "_inc_gpu_day_hours"),
        (PIECES_MART, "_inc_gpu_day_pieces"),
    ):
        con.execute(
            f"""
            create or replace temp view {view} as
            select rows.*,
            from {source} as rows
            inner join _inc_cut
                on _inc_cut.gpu_uuid = rows.gpu_uuid and rows.day >= _inc_cut.from_day
            where rows.day >= (select min(from_day) from _inc_cut)
            union all by name
            select rows.*,
            from {source} as rows
            inner join _inc_extra_days
                on _inc_extra_days.gpu_uuid = rows.gpu_uuid and _inc_extra_days.day = rows.day
            """
        )
    episode_days = models["int_idle_episode_days"]
    con.execute(
        "create or replace temp table _inc_gpu_day_episode_days as\n"
        + render(episode_days, {PIECES_MODEL: "_inc_gpu_day_pieces"})
    )
    con.execute(
        """
        create or replace temp table _inc_gpu_day_episodes as
        select episodes.*,
        from idle_episodes as episodes
        semi join _inc_gpu_day_episode_days as days
            on days.gpu_uuid = episodes.gpu_uuid and days.episode_id = episodes.episode_id
        where episodes.end_ts >= (select min(first_ts) from _inc_gpu_day_episode_days)
        """
    )


def replace_alloc_only_days(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]
) -> None:
    """alloc_only_daily: the rows of the days whose rows changed, and those days (and their
    weeks) added to the days the daily and weekly marts recompute."""
    con.execute(f"create or replace temp table _inc_alloc_only as\n{render(model, remap)}")
    columns = ", ".join(f'"{row[0]}"' for row in con.execute(f"describe {model.name}").fetchall())
    con.execute(
        f"""
        create or replace temp table _inc_alloc_only_days as
        select distinct day from (
            (select {columns} from _inc_alloc_only
             except all select {columns} from {model.name})
            union all
            (select {columns} from {model.name}
             except all select {columns} from _inc_alloc_only)
        )
        """
    )
    days = "day in (select day from _inc_alloc_only_days)"
    con.execute(f"delete from {model.name} where {days}")
    con.execute(f"insert into {model.name} by name select * from _inc_alloc_only where {days}")
    log_replaced(con, model.name, "day", "select day from _inc_alloc_only_days")
    con.execute("insert into _inc_days select day from _inc_alloc_only_days")
    con.execute(
        "create or replace temp table _inc_weeks as"
        " select distinct iso_week(day) as iso_week from _inc_days"
    )
    con.execute("drop table temp._inc_alloc_only")
    con.execute("drop table temp._inc_alloc_only_days")


def replace_period_rows(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str], *, per_week: bool
) -> None:
    """A daily or weekly mart: every row of the days (weeks) whose gpu_team_daily changed."""
    key = "iso_week" if per_week else "day"
    periods = "_inc_weeks" if per_week else "_inc_days"
    con.execute(f"delete from {model.name} where {key} in (select {key} from {periods})")
    con.execute(
        f"""
        create or replace temp view _inc_gpu_team_daily as
        select * from gpu_team_daily where {key} in (select {key} from {periods})
        """
    )
    con.execute(
        f"""
        create or replace temp view _inc_alloc_only_daily as
        select * from {ALLOC_ONLY_MART} where {key} in (select {key} from {periods})
        """
    )
    sources = {"gpu_team_daily": "_inc_gpu_team_daily", ALLOC_ONLY_MART: "_inc_alloc_only_daily"}
    con.execute(f"insert into {model.name} by name\n{render(model, {**remap, **sources})}")
    con.execute("drop view temp._inc_alloc_only_daily")
    log_replaced(con, model.name, key, f"select {key} from {periods}")
