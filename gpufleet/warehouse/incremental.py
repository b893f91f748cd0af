"""The incremental build: recompute only the hours and days that new samples touch.

The SQL models are written once, for the whole warehouse. An incremental build runs the same
files on a slice of it, by reading other relations in their place (`render(model, remap)`):

1. New samples are those loaded since the watermark (`samples_stored.load_id`, the publish
   that loaded each row). Per GPU series, `since_ts` is the first new sample's time.
2. The models up to `samples_attributed` run on the new samples of those series plus, per
   series, the one sample before them that can still be contiguous with the first new one
   (its energy counter, idle and thermal state feed the first new row). Rows from `since_ts`
   on are replaced; earlier rows cannot change, since every per-sample value depends only on
   the sample itself and the one before it.
3. Per series, the cut is the local hour (`from_day`, `from_hour`) of `since_ts`; the
   series' `samples_attributed` rows from the cut on are the window, so a cycle reads
   about an hour of old samples per series, whatever the time of day. The window must be
   every row from some time on: where local hours go back past the cut (a clock change
   of two hours, or one across midnight) it is not, and only a full build can.
   `run_pieces` (idle and thermal samples summed per run, local hour and host) and
   `gpu_hourly` are recomputed on the window and replace the series' rows from the cut
   on; a run already open where the window begins keeps the start of the series' last run
   of its kind before it. The runs touched (those of the pieces replaced or added) are
   added up again from all their pieces into `idle_episodes` and `thermal_events`, so an
   episode that crosses midnight, or lasts a week, comes out whole without reading its
   old samples.
4. `gpu_team_daily` is recomputed for the series' days from `from_day` on (from their hours
   in `gpu_hourly` and pieces in `run_pieces`, not from samples), and for the earlier days
   of an episode that became waste (or stopped being waste) in this build; `team_daily`,
   `gpu_daily` and `host_daily` are summed again from it for the days whose rows changed,
   and `team_weekly` for their weeks.

A fingerprint of the SQL, the configuration and the reference tables is kept with the
watermark; when it changes, or a series' GPU name would change, the next build is a full
one. `tests/test_incremental.py` proves an incremental build equals a full one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.ids import ensure_id_tables, record_new_ids
from gpufleet.warehouse.lake import create_samples_since
from gpufleet.warehouse.models import Model, create_model, drop_model, render
from gpufleet.warehouse.slots import GENERATION_DDL, current_generation

STATE_DDL = """
create schema if not exists build_state;
create table if not exists build_state.watermark (
    samples_load_id bigint not null, -- the last load (samples_stored.load_id) the marts include
    fingerprint varchar not null,    -- of the SQL, configuration and reference tables
    built_at timestamptz not null
);
create table if not exists build_state.allocations_built as
select job_id, "user", team, host, gpu_index, start_ts, end_ts from allocations limit 0;
"""

# How the incremental build replaces each mart's rows; any other mart means a full build.
PER_SAMPLE_MART = "samples_attributed_rows"
PIECES_MART = "run_pieces"
RUN_MARTS = ("idle_episodes", "thermal_events")
GPU_DAY_MART = "gpu_team_daily"
GPU_HOUR_MART = "gpu_hourly"
PER_DAY_MARTS = ("team_daily", "gpu_daily", "host_daily")
PER_WEEK_MARTS = ("team_weekly",)
# int_thermal_events reads the touched thermal runs' pieces, the rest the idle runs'.
REMAP_OVERRIDES = {"int_thermal_events": {PIECES_MART: "_inc_thermal_pieces"}}
# Allocations are not here: a change in them recomputes the GPUs they cover, incrementally.
REFERENCE_TABLES = ("ref_users", "ref_hosts", "ref_prices")


@dataclass(frozen=True, kw_only=True)
class BuildState:
    """What the last build left behind."""

    samples_load_id: int
    fingerprint: str


@dataclass(frozen=True, kw_only=True)
class IncrementalOutcome:
    """What an incremental build recomputed (series, their new samples, local days)."""

    series: int
    new_samples: int
    days: int


def ensure_state_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(GENERATION_DDL)
    ensure_id_tables(con)
    con.execute(STATE_DDL)


def read_state(con: duckdb.DuckDBPyConnection) -> BuildState | None:
    row = con.execute(
        "select samples_load_id, fingerprint from build_state.watermark order by built_at desc"
    ).fetchone()
    return None if row is None else BuildState(samples_load_id=int(row[0]), fingerprint=row[1])


def samples_load_top(con: duckdb.DuckDBPyConnection, *, after: int = -1) -> int:
    """The last load in `samples_stored` past `after`, or `after` if none (loads only grow:
    zone maps on load_id skip the row groups of earlier ones)."""
    row = con.execute(
        "select max(load_id) from samples_stored where load_id > ?", [after]
    ).fetchone()
    return after if row is None or row[0] is None else int(row[0])


def fingerprint(
    con: duckdb.DuckDBPyConnection, variables: Mapping[str, object], sql_files: Iterable[Path]
) -> str:
    """A digest of everything besides new samples that a build's result depends on."""
    digest = hashlib.sha256()
    for path in sorted(sql_files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for name, value in sorted(variables.items()):
        digest.update(f"{name}={value!r}\0".encode())
    for table in REFERENCE_TABLES:
        row = con.execute(
            f"select count(*), coalesce(sum(hash(t)::hugeint), 0) from {table} as t"
        ).fetchone()
        digest.update(f"{table}:{row}\0".encode())
    return digest.hexdigest()


def record_full_build(con: duckdb.DuckDBPyConnection, *, top: int, digest: str) -> None:
    """After a full build: the watermark and fingerprint (the build kept every series' id
    and GPU name in build_state.series, gpufleet/warehouse/ids.py)."""
    con.execute("delete from build_state.watermark")
    con.execute("insert into build_state.watermark values (?, ?, now())", [top, digest])
    record_allocations(con)
    # The other warehouse slot cannot replay a full build; it is copied afresh instead.
    con.execute("insert into build_state.full_builds values (?)", [current_generation(con)])


def _names_would_change(con: duckdb.DuckDBPyConnection) -> bool:
    """A series' GPU name is the max over its samples; a larger new one renames old rows."""
    row = con.execute(
        """
        select count(*) from _inc_series
        inner join build_state.series on build_state.series.gpu_uuid = _inc_series.gpu_uuid
        where _inc_series.gpu_name > coalesce(build_state.series.gpu_name, '')
        """
    ).fetchone()
    return bool(row and row[0])


ALLOCATION_COLUMNS = 'job_id, "user", team, host, gpu_index, start_ts, end_ts'
# The allocations added, removed or changed since the marts were built (both directions).
ALLOCATION_CHANGES_SQL = f"""
(select {ALLOCATION_COLUMNS} from allocations
 except all select {ALLOCATION_COLUMNS} from build_state.allocations_built)
union all
(select {ALLOCATION_COLUMNS} from build_state.allocations_built
 except all select {ALLOCATION_COLUMNS} from allocations)
"""


def allocations_changed(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the allocations differ from those the marts were built with."""
    row = con.execute(f"select count(*) from ({ALLOCATION_CHANGES_SQL})").fetchone()
    return bool(row and row[0])


def record_allocations(con: duckdb.DuckDBPyConnection) -> None:
    """The allocations the marts are now built with (the next build diffs against them)."""
    con.execute("delete from build_state.allocations_built")
    con.execute(
        f"insert into build_state.allocations_built select {ALLOCATION_COLUMNS} from allocations"
    )


def _select_new_samples(
    con: duckdb.DuckDBPyConnection, config: Config, *, after: int, top: int
) -> None:
    """_inc_series (series with new samples, or whose allocations changed) and _inc_samples
    (what stg_samples reads).

    A series' `since_ts` is its first new sample, or its first sample after the start of an
    allocation added, removed or changed on its host and GPU index, whichever is earlier.
    """
    con.execute(
        f"""
        create or replace temp table _inc_allocation_changes as
        {ALLOCATION_CHANGES_SQL}
        """
    )
    # Samples from the earliest allocation change on, and from the earliest sample a series'
    # first new one can be contiguous with: samples_stored and the lake's files of those days.
    row = con.execute("select min(start_ts) from _inc_allocation_changes").fetchone()
    create_samples_since(con, config, "_inc_allocation_samples", row[0] if row else None)
    con.execute(
        """
        create or replace temp table _inc_series as
        with changes as (
            select
                gpu_uuid,
                min(ts) as since_ts,
                max(gpu_name) as gpu_name,
                max(interval_s) as max_interval_s,
                count(*) as new_samples,
            from samples_stored
            where load_id > $after and load_id <= $top
            group by gpu_uuid
            union all
            select
                samples.gpu_uuid,
                min(samples.ts),
                null,
                arg_min(samples.interval_s, samples.ts),
                0,
            from _inc_allocation_samples as samples
            inner join _inc_allocation_changes as allocation
                on allocation.host = samples.host
                and allocation.gpu_index = samples.gpu_index
                and samples.ts > allocation.start_ts
            where samples.ts > (select min(start_ts) from _inc_allocation_changes)
            group by samples.gpu_uuid
        )
        select
            gpu_uuid,
            min(since_ts) as since_ts,
            max(gpu_name) as gpu_name,
            -- the sample before since_ts matters only while it can be contiguous
            min(since_ts) - to_microseconds(
                ($gap_factor * max(max_interval_s)::double * 1000000)::bigint + 1
            ) as context_ts,
            sum(new_samples)::bigint as new_samples,
        from changes
        group by gpu_uuid
        """,
        {"gap_factor": config.series.max_gap_factor, "after": after, "top": top},
    )
    row = con.execute("select min(context_ts) from _inc_series").fetchone()
    create_samples_since(con, config, "_inc_source", row[0] if row else None)
    con.execute(
        """
        create or replace temp table _inc_samples as
        with bounds as (
            select min(since_ts) as since_ts, min(context_ts) as context_ts, from _inc_series
        ),
        context as (
            select samples.gpu_uuid, max(samples.ts) as ts,
            from _inc_source as samples
            inner join _inc_series on _inc_series.gpu_uuid = samples.gpu_uuid
            where samples.ts >= (select context_ts from bounds)
                and samples.ts >= _inc_series.context_ts
                and samples.ts < _inc_series.since_ts
            group by samples.gpu_uuid
        )
        select samples.*,
        from _inc_source as samples
        inner join _inc_series on _inc_series.gpu_uuid = samples.gpu_uuid
        where samples.ts >= (select since_ts from bounds)
            and samples.ts >= _inc_series.since_ts
        union all by name
        select samples.*,
        from _inc_source as samples
        inner join context on context.gpu_uuid = samples.gpu_uuid and context.ts = samples.ts
        where samples.ts >= (select context_ts from bounds)
        """
    )


def _keep_series_names(con: duckdb.DuckDBPyConnection) -> None:
    """The series' names as built, not just the max over the slice (int_series_ids)."""
    con.execute(
        """
        update int_series_ids
        set gpu_name = build_state.series.gpu_name
        from build_state.series
        where build_state.series.gpu_uuid = int_series_ids.gpu_uuid
            and build_state.series.gpu_name is not null
            and (int_series_ids.gpu_name is null
                or int_series_ids.gpu_name < build_state.series.gpu_name)
        """
    )


def _from_cut(rows: str) -> str:
    """SQL: the row `rows` (with day and hour) is at or after its series' cut (_inc_cut)."""
    return (
        f"({rows}.day > _inc_cut.from_day"
        f" or ({rows}.day = _inc_cut.from_day and {rows}.hour >= _inc_cut.from_hour))"
    )


def _window_is_a_suffix(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether each series' window (its rows from the cut on) is all its rows from the
    window's first sample on. Local (day, hour) almost never goes back as time goes on (an
    hour repeated when clocks go back an hour is one hour here too), but where clocks go back
    two hours, or across midnight, a later sample can fall before the cut."""
    row = con.execute(
        f"""
        with starts as (
            select series_id, min(ts) as start_ts, from _inc_window group by series_id
        )
        select count(*)
        from {PER_SAMPLE_MART} as rows
        inner join starts on starts.series_id = rows.series_id and rows.ts >= starts.start_ts
        inner join _inc_cut on _inc_cut.series_id = rows.series_id
        where not {_from_cut("rows")}
            and rows.ts >= (select min(start_ts) from starts)
        """
    ).fetchone()
    return not (row and row[0])


def _log_replaced(con: duckdb.DuckDBPyConnection, table: str, key: str, keys_sql: str) -> None:
    """Log which rows of `table` this build replaced, for the other warehouse slot to
    replace the same way when it catches up (gpufleet/warehouse/slots.py, REPLAY_KEYS)."""
    con.execute(
        f"""
        insert into build_state.replaced by name
        select ? as generation, ? as table_name, ? as key, keys.*,
        from ({keys_sql}) as keys
        """,
        [current_generation(con), table, key],
    )


def _replace_sample_rows(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]
) -> None:
    """samples_attributed_rows: the rows from each series' since_ts on, the context row
    left out (by series id: the series' ids are those it already has, gpufleet/warehouse/ids.py)."""
    con.execute(f"create or replace temp table _inc_attributed as\n{render(model, remap)}")
    con.execute(
        """
        create or replace temp table _inc_series_ids as
        select int_series_ids.series_id, _inc_series.*,
        from _inc_series
        inner join int_series_ids on int_series_ids.gpu_uuid = _inc_series.gpu_uuid
        """
    )
    con.execute(
        f"""
        delete from {model.name} using _inc_series_ids
        where {model.name}.series_id = _inc_series_ids.series_id
            and {model.name}.ts >= _inc_series_ids.since_ts
            and {model.name}.ts >= (select min(since_ts) from _inc_series_ids)
        """
    )
    _log_replaced(
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


def _replace_pieces(con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]) -> bool:
    """run_pieces from each series' cut on; False if an open run's start is unknown.

    A run open where the window begins gets the start of the series' last run of that kind
    before the cut (the run of the sample just before the window). The runs touched are
    those of the pieces replaced and of the new ones.
    """
    con.execute(f"create or replace temp table _inc_pieces as\n{render(model, remap)}")
    # A run still open at the cut has a piece that day or the day before unless the series
    # has no samples in them (a gap only a very long interval keeps contiguous): those days
    # are read first, the whole history only if they leave a run's start unknown.
    for recent_only in (True, False):
        _carry_run_starts(con, model.name, recent_only=recent_only)
        unknown = con.execute(
            """
            select count(*) from _inc_pieces
            where idle_run_start_ts = '-infinity'::timestamptz
                or thermal_run_start_ts = '-infinity'::timestamptz
            """
        ).fetchone()
        if not (unknown and unknown[0]):
            break
    else:
        return False
    for kind in ("idle", "thermal"):
        con.execute(
            f"""
            create or replace temp table _inc_touched_{kind} as
            select distinct
                gpu_uuid,
                run_start_ts,
                (hash(gpu_uuid, run_start_ts) >> 1)::bigint as run_id,
            from (
                select pieces.gpu_uuid, pieces.{kind}_run_start_ts as run_start_ts,
                from {model.name} as pieces
                inner join _inc_cut
                    on _inc_cut.gpu_uuid = pieces.gpu_uuid and {_from_cut("pieces")}
                where pieces.day >= (select min(from_day) from _inc_cut)
                union all
                select gpu_uuid, {kind}_run_start_ts, from _inc_pieces
            )
            where run_start_ts is not null
            """
        )
    _replace_from_cut(con, model.name, "select * from _inc_pieces")
    for kind in ("idle", "thermal"):
        con.execute(
            f"""
            create or replace temp view _inc_{kind}_pieces as
            select pieces.*,
            from {model.name} as pieces
            semi join _inc_touched_{kind}
                on _inc_touched_{kind}.gpu_uuid = pieces.gpu_uuid
                and _inc_touched_{kind}.run_start_ts = pieces.{kind}_run_start_ts
            """
        )
    return True


def _carry_run_starts(con: duckdb.DuckDBPyConnection, table: str, *, recent_only: bool) -> None:
    """Give the new pieces of a run open at the cut ('-infinity') the start of the series'
    latest run of that kind before the cut, from the pieces of the cut's day and the day
    before only (`recent_only`) or of all days. The second bound on the day is the first's
    lowest value as a constant, which lets the zone maps skip older row groups."""
    days = (
        """
                and pieces.day >= _inc_cut.from_day - 1
            where pieces.day >= (select min(from_day) from _inc_cut) - 1"""
        if recent_only
        else ""
    )
    con.execute(
        f"""
        create or replace temp table _inc_carry as
        select
            pieces.gpu_uuid,
            arg_max(pieces.idle_run_start_ts, pieces.last_ts)
                filter (where pieces.idle_run_start_ts is not null) as idle_run_start_ts,
            arg_max(pieces.thermal_run_start_ts, pieces.last_ts)
                filter (where pieces.thermal_run_start_ts is not null) as thermal_run_start_ts,
        from {table} as pieces
        inner join _inc_cut
            on _inc_cut.gpu_uuid = pieces.gpu_uuid
            and not {_from_cut("pieces")}{days}
        group by pieces.gpu_uuid
        """
    )
    for kind in ("idle", "thermal"):
        con.execute(
            f"""
            update _inc_pieces
            set {kind}_run_start_ts = _inc_carry.{kind}_run_start_ts
            from _inc_carry
            where _inc_carry.gpu_uuid = _inc_pieces.gpu_uuid
                and _inc_pieces.{kind}_run_start_ts = '-infinity'::timestamptz
                -- a pass sets only the starts it found (the next pass looks further back)
                and _inc_carry.{kind}_run_start_ts is not null
            """
        )


def _replace_runs(con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]) -> None:
    """idle_episodes or thermal_events: the touched runs, added up from all their pieces."""
    kind, id_column = (
        ("idle", "episode_id") if model.name == "idle_episodes" else ("thermal", "event_id")
    )
    if kind == "idle":
        con.execute(
            f"""
            create or replace temp table _inc_old_waste as
            select runs.gpu_uuid, runs.{id_column} as run_id, runs.is_waste,
            from {model.name} as runs
            semi join _inc_touched_idle
                on _inc_touched_idle.gpu_uuid = runs.gpu_uuid
                and _inc_touched_idle.run_id = runs.{id_column}
            """
        )
    con.execute(
        f"""
        delete from {model.name} using _inc_touched_{kind}
        where {model.name}.gpu_uuid = _inc_touched_{kind}.gpu_uuid
            and {model.name}.{id_column} = _inc_touched_{kind}.run_id
        """
    )
    con.execute(f"insert into {model.name} by name\n{render(model, remap)}")
    _log_replaced(
        con,
        model.name,
        "gpu_episode" if kind == "idle" else "gpu_event",
        f"select gpu_uuid, run_id from _inc_touched_{kind}",
    )


def _replace_gpu_days(
    con: duckdb.DuckDBPyConnection,
    model: Model,
    models: Mapping[str, Model],
    remap: Mapping[str, str],
) -> None:
    """gpu_team_daily: each series' days from from_day on, and the earlier days of episodes
    that became waste (or stopped being waste) in this build."""
    con.execute(
        f"""
        create or replace temp table _inc_extra_days as
        select distinct pieces.gpu_uuid, pieces.day,
        from {PIECES_MART} as pieces
        inner join _inc_touched_idle
            on _inc_touched_idle.gpu_uuid = pieces.gpu_uuid
            and _inc_touched_idle.run_start_ts = pieces.idle_run_start_ts
        inner join _inc_cut on _inc_cut.gpu_uuid = pieces.gpu_uuid
        left join _inc_old_waste
            on _inc_old_waste.gpu_uuid = _inc_touched_idle.gpu_uuid
            and _inc_old_waste.run_id = _inc_touched_idle.run_id
        left join idle_episodes
            on idle_episodes.gpu_uuid = _inc_touched_idle.gpu_uuid
            and idle_episodes.episode_id = _inc_touched_idle.run_id
        where pieces.day < _inc_cut.from_day
            and coalesce(_inc_old_waste.is_waste, false)
                <> coalesce(idle_episodes.is_waste, false)
        """
    )
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
        + render(episode_days, {PIECES_MART: "_inc_gpu_day_pieces"})
    )
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
        },
    )
    con.execute(f"insert into {model.name} by name\n{sql}")
    con.execute(f"insert into _inc_days select distinct day {in_scope}")
    _log_replaced(con, model.name, "gpu_from_day", "select gpu_uuid, from_day as day from _inc_cut")
    _log_replaced(con, model.name, "gpu_day", "select gpu_uuid, day from _inc_extra_days")
    con.execute(
        """
        create or replace temp table _inc_weeks as
        select distinct iso_week(day) as iso_week from _inc_days;
        """
    )


def _replace_gpu_hours(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]
) -> None:
    """gpu_hourly: each series' rows from its cut on, from the window."""
    _replace_from_cut(con, model.name, render(model, remap))


def _replace_from_cut(con: duckdb.DuckDBPyConnection, table: str, rows_sql: str) -> None:
    """Replace each series' rows of `table` from its cut on with `rows_sql`'s."""
    con.execute(
        f"""
        delete from {table} using _inc_cut
        where {table}.gpu_uuid = _inc_cut.gpu_uuid and {_from_cut(table)}
            and {table}.day >= (select min(from_day) from _inc_cut)
        """
    )
    con.execute(f"insert into {table} by name\n{rows_sql}")
    _log_replaced(
        con,
        table,
        "gpu_from_hour",
        "select gpu_uuid, from_day as day, from_hour as hour from _inc_cut",
    )


def _replace_period_rows(
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
        f"insert into {model.name} by name\n"
        f"{render(model, {**remap, 'gpu_team_daily': '_inc_gpu_team_daily'})}"
    )
    _log_replaced(con, model.name, key, f"select {key} from {periods}")


def build_incrementally(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    models: Mapping[str, Model],
    order: list[str],
    *,
    after: int,
    top: int,
) -> IncrementalOutcome | str:
    """Bring the marts up to load `top` of samples_stored; or why only a full build can."""
    marts = {
        name
        for name in order
        if models[name].layer == "marts" and models[name].materialized != "view"
    }
    known = {PER_SAMPLE_MART, PIECES_MART, *RUN_MARTS, GPU_DAY_MART, GPU_HOUR_MART}
    if marts != known | set(PER_DAY_MARTS) | set(PER_WEEK_MARTS):
        return "a mart has no incremental plan"
    _select_new_samples(con, config, after=after, top=top)
    if _names_would_change(con):
        return "a GPU's name changed"
    con.execute("create or replace temp table _inc_days (day date)")
    remap = {"samples": "_inc_samples"}
    created: list[Model] = []
    try:
        for name in order:
            model = models[name]
            if model.materialized == "view":
                continue  # a view of other marts: nothing to recompute
            if model.layer != "marts":
                create_model(con, model, {**remap, **REMAP_OVERRIDES.get(name, {})})
                created.append(model)
                if name == "int_series_ids":
                    _keep_series_names(con)
                record_new_ids(con, name)
            elif name == PER_SAMPLE_MART:
                _replace_sample_rows(con, model, remap)
                con.execute(
                    f"""
                    create or replace temp table _inc_cut as
                    select
                        gpu_uuid,
                        series_id,
                        local_ts::date as from_day,
                        hour(local_ts) as from_hour,
                    from (
                        select
                            gpu_uuid,
                            series_id,
                            timezone(getvariable('timezone'), since_ts) as local_ts,
                        from _inc_series_ids
                    );
                    create or replace temp view _inc_window as
                    select rows.*,
                    from {PER_SAMPLE_MART} as rows
                    inner join _inc_cut
                        on _inc_cut.series_id = rows.series_id and {_from_cut("rows")}
                    where rows.day >= (select min(from_day) from _inc_cut);
                    """
                )
                if not _window_is_a_suffix(con):
                    return "local hours go back where the new samples begin (a clock change)"
                remap = {**remap, PER_SAMPLE_MART: "_inc_window"}
            elif name == PIECES_MART:
                if not _replace_pieces(con, model, remap):
                    return "the start of a run open before the new samples is unknown"
                # The runs' models read the pieces of the touched runs only.
                remap = {**remap, PIECES_MART: "_inc_idle_pieces"}
            elif name in RUN_MARTS:
                _replace_runs(con, model, remap)
            elif name == GPU_DAY_MART:
                _replace_gpu_days(con, model, models, remap)
            elif name == GPU_HOUR_MART:
                _replace_gpu_hours(con, model, remap)
            else:
                _replace_period_rows(con, model, remap, per_week=name in PER_WEEK_MARTS)
        totals = con.execute(
            """
            select
                (select count(*) from _inc_series),
                (select coalesce(sum(new_samples), 0) from _inc_series),
                (select count(distinct day) from _inc_days)
            """
        ).fetchone()
        con.execute("update build_state.watermark set samples_load_id = ?, built_at = now()", [top])
        record_allocations(con)
    finally:
        for model in reversed(created):
            drop_model(con, model)
        for view in _TEMP_VIEWS:
            con.execute(f"drop view if exists temp.{view}")
        for table in _TEMP_TABLES:
            con.execute(f"drop table if exists temp.{table}")
    assert totals is not None
    return IncrementalOutcome(series=totals[0], new_samples=int(totals[1]), days=totals[2])


_TEMP_VIEWS = (
    "_inc_allocation_samples",
    "_inc_source",
    "_inc_window",
    "_inc_idle_pieces",
    "_inc_thermal_pieces",
    "_inc_gpu_day_hours",
    "_inc_gpu_day_pieces",
    "_inc_gpu_team_daily",
)
_TEMP_TABLES = (
    "_inc_allocation_changes",
    "_inc_series",
    "_inc_series_ids",
    "_inc_samples",
    "_inc_attributed",
    "_inc_cut",
    "_inc_carry",
    "_inc_pieces",
    "_inc_touched_idle",
    "_inc_touched_thermal",
    "_inc_old_waste",
    "_inc_extra_days",
    "_inc_gpu_day_episode_days",
    "_inc_days",
    "_inc_weeks",
)
