"""The incremental build: recompute only the days that new samples touch.

The SQL models are written once, for the whole warehouse. An incremental build runs the same
files on a slice of it, by reading other relations in their place (`render(model, remap)`):

1. New samples are those past the watermark (`samples` is append-only, so its rowid is a load
   order). Per GPU series, `since_ts` is the first new sample's time.
2. The models up to `samples_attributed` run on the new samples of those series plus, per
   series, the one sample before them that can still be contiguous with the first new one
   (its energy counter, idle and thermal state feed the first new row). Rows from `since_ts`
   on are replaced; earlier rows cannot change, since every per-sample value depends only on
   the sample itself and the one before it.
3. Per series, `from_day` starts at the local day of `since_ts` and moves back while an idle
   episode or thermal event crosses into it (a run crossing midnight must come out whole).
   Everything of the series from `from_day` on (`samples_attributed` rows) is the window:
   the episode, event and `gpu_team_daily` models run on it and replace the series' rows of
   those days; as no run crosses `from_day`, they come out as a full build makes them.
4. `team_daily`, `gpu_daily` and `host_daily` are summed again from `gpu_team_daily` for the
   days whose rows changed, and `team_weekly` for their weeks.

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

from flows.models import Model, create_model, drop_model, render
from gpufleet.config import Config

STATE_DDL = """
create schema if not exists build_state;
create table if not exists build_state.watermark (
    samples_rowid bigint not null,   -- the last samples rowid the marts include
    fingerprint varchar not null,    -- of the SQL, configuration and reference tables
    built_at timestamptz not null
);
create table if not exists build_state.series (
    gpu_uuid varchar primary key,
    gpu_name varchar                 -- max(gpu_name) over the series' samples, as built
);
"""

# How the incremental build replaces each mart's rows; any other mart means a full build.
PER_SAMPLE_MART = "samples_attributed"
PER_SERIES_MARTS = {"idle_episodes": "end_ts", "thermal_events": "end_ts", "gpu_team_daily": "day"}
PER_DAY_MARTS = ("team_daily", "gpu_daily", "host_daily")
PER_WEEK_MARTS = ("team_weekly",)
REFERENCE_TABLES = ("ref_users", "ref_hosts", "ref_prices", "allocations")
MAX_DAY_STEPS = 400  # a run this many days long is rebuilt in full instead


@dataclass(frozen=True, kw_only=True)
class BuildState:
    """What the last build left behind."""

    samples_rowid: int
    fingerprint: str


@dataclass(frozen=True, kw_only=True)
class IncrementalOutcome:
    """What an incremental build recomputed (series, their new samples, local days)."""

    series: int
    new_samples: int
    days: int


def ensure_state_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(STATE_DDL)


def read_state(con: duckdb.DuckDBPyConnection) -> BuildState | None:
    row = con.execute(
        "select samples_rowid, fingerprint from build_state.watermark order by built_at desc"
    ).fetchone()
    return None if row is None else BuildState(samples_rowid=int(row[0]), fingerprint=row[1])


def samples_rowid_top(con: duckdb.DuckDBPyConnection, *, after: int = -1) -> int:
    """The highest rowid in `samples` (append-only: rowids only grow), or `after` if none."""
    row = con.execute("select max(rowid) from samples where rowid > ?", [after]).fetchone()
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
    """After a full build: the watermark, fingerprint and every series' GPU name."""
    con.execute("delete from build_state.watermark")
    con.execute("insert into build_state.watermark values (?, ?, now())", [top, digest])
    con.execute("delete from build_state.series")
    con.execute(
        "insert into build_state.series select gpu_uuid, max(gpu_name) from samples group by 1"
    )


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


def _select_new_samples(
    con: duckdb.DuckDBPyConnection, config: Config, *, after: int, top: int
) -> None:
    """_inc_series (series with new samples) and _inc_samples (what stg_samples reads)."""
    con.execute(
        """
        create or replace temp table _inc_series as
        select
            gpu_uuid,
            min(ts) as since_ts,
            max(gpu_name) as gpu_name,
            -- the sample before since_ts matters only while it can be contiguous
            min(ts) - to_microseconds(
                (? * max(interval_s)::double * 1000000)::bigint + 1
            ) as context_ts,
            count(*) as new_samples,
        from samples
        where rowid > ? and rowid <= ?
        group by gpu_uuid
        """,
        [config.series.max_gap_factor, after, top],
    )
    con.execute(
        """
        create or replace temp table _inc_samples as
        with bounds as (
            select min(since_ts) as since_ts, min(context_ts) as context_ts, from _inc_series
        ),
        context as (
            select samples.gpu_uuid, max(samples.ts) as ts,
            from samples
            inner join _inc_series on _inc_series.gpu_uuid = samples.gpu_uuid
            where samples.ts >= (select context_ts from bounds)
                and samples.ts >= _inc_series.context_ts
                and samples.ts < _inc_series.since_ts
            group by samples.gpu_uuid
        )
        select samples.*,
        from samples
        inner join _inc_series on _inc_series.gpu_uuid = samples.gpu_uuid
        where samples.ts >= (select since_ts from bounds)
            and samples.ts >= _inc_series.since_ts
        union all by name
        select samples.*,
        from samples
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


def _replace_sample_rows(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str]
) -> None:
    """samples_attributed: the rows from each series' since_ts on, the context row left out."""
    con.execute(f"create or replace temp table _inc_attributed as\n{render(model, remap)}")
    con.execute(
        f"""
        delete from {model.name} using _inc_series
        where {model.name}.gpu_uuid = _inc_series.gpu_uuid
            and {model.name}.ts >= _inc_series.since_ts
            and {model.name}.ts >= (select min(since_ts) from _inc_series)
        """
    )
    con.execute(
        f"""
        insert into {model.name} by name
        select _inc_attributed.*,
        from _inc_attributed
        inner join _inc_series on _inc_series.gpu_uuid = _inc_attributed.gpu_uuid
        where _inc_attributed.ts >= _inc_series.since_ts
        """
    )


def _settle_from_days(con: duckdb.DuckDBPyConnection) -> None:
    """_inc_cut: per series, the first local day to recompute, where no run crosses midnight.

    A run crosses into from_day when the series' first sample on or after it continues an idle
    or thermal run. Then from_day moves back one day, or to the first day of an episode or
    event already known to cross it, and the series is checked again.
    """
    con.execute(
        """
        create or replace temp table _inc_cut as
        select
            gpu_uuid,
            timezone(getvariable('timezone'), since_ts)::date as from_day,
            false as settled,
        from _inc_series
        """
    )
    for _ in range(MAX_DAY_STEPS):
        con.execute(
            """
            create or replace temp table _inc_step as
            with open_cuts as (
                select * from _inc_cut where not settled
            ),
            first_samples as (
                select
                    open_cuts.gpu_uuid,
                    arg_min(
                        coalesce(
                            (rows.is_idle and not rows.starts_idle_episode)
                            or (rows.is_thermal and not rows.starts_thermal_event),
                            false
                        ),
                        rows.ts
                    ) as continues_run,
                from samples_attributed as rows
                inner join open_cuts
                    on open_cuts.gpu_uuid = rows.gpu_uuid and rows.day >= open_cuts.from_day
                where rows.day >= (select min(from_day) from open_cuts)
                group by open_cuts.gpu_uuid
            ),
            runs as (
                select gpu_uuid, start_ts, end_ts, from idle_episodes
                union all
                select gpu_uuid, start_ts, end_ts, from thermal_events
            ),
            known_crossings as (
                select
                    open_cuts.gpu_uuid,
                    min(timezone(getvariable('timezone'), runs.start_ts)::date) as first_day,
                from runs
                inner join open_cuts on open_cuts.gpu_uuid = runs.gpu_uuid
                where timezone(getvariable('timezone'), runs.start_ts)::date < open_cuts.from_day
                    and timezone(getvariable('timezone'), runs.end_ts)::date
                        >= open_cuts.from_day
                group by open_cuts.gpu_uuid
            )
            select
                open_cuts.gpu_uuid,
                coalesce(first_samples.continues_run, false) as continues_run,
                least(open_cuts.from_day - 1, known_crossings.first_day) as earlier_day,
            from open_cuts
            left join first_samples on first_samples.gpu_uuid = open_cuts.gpu_uuid
            left join known_crossings on known_crossings.gpu_uuid = open_cuts.gpu_uuid
            """
        )
        con.execute(
            """
            update _inc_cut
            set
                from_day = case when _inc_step.continues_run
                    then _inc_step.earlier_day else _inc_cut.from_day end,
                settled = not _inc_step.continues_run
            from _inc_step
            where _inc_step.gpu_uuid = _inc_cut.gpu_uuid
            """
        )
        row = con.execute("select count(*) from _inc_cut where not settled").fetchone()
        if not row or not row[0]:
            return
    raise RuntimeError(f"a run spans more than {MAX_DAY_STEPS} days")


def _replace_series_rows(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str], *, time_column: str
) -> None:
    """A per-series mart: the series' rows on and after from_day."""
    day = (
        "day"
        if time_column == "day"
        else f"timezone(getvariable('timezone'), {model.name}.{time_column})::date"
    )
    if model.name == "gpu_team_daily":
        con.execute(
            f"""
            insert into _inc_days
            select distinct {model.name}.day
            from {model.name}
            inner join _inc_cut on _inc_cut.gpu_uuid = {model.name}.gpu_uuid
            where {model.name}.day >= _inc_cut.from_day
            """
        )
    con.execute(
        f"""
        delete from {model.name} using _inc_cut
        where {model.name}.gpu_uuid = _inc_cut.gpu_uuid
            and {day} >= _inc_cut.from_day
        """
    )
    con.execute(f"insert into {model.name} by name\n{render(model, remap)}")
    if model.name == "gpu_team_daily":
        con.execute(
            """
            insert into _inc_days
            select distinct gpu_team_daily.day
            from gpu_team_daily
            inner join _inc_cut on _inc_cut.gpu_uuid = gpu_team_daily.gpu_uuid
            where gpu_team_daily.day >= _inc_cut.from_day
            """
        )


def _replace_period_rows(
    con: duckdb.DuckDBPyConnection, model: Model, remap: Mapping[str, str], *, per_week: bool
) -> None:
    """A daily or weekly mart: every row of the days (weeks) whose gpu_team_daily changed."""
    key = "iso_week" if per_week else "day"
    periods = "_inc_weeks" if per_week else "_inc_day_set"
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


def build_incrementally(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    models: Mapping[str, Model],
    order: list[str],
    *,
    after: int,
    top: int,
) -> IncrementalOutcome | None:
    """Bring the marts up to rowid `top` of samples; None when only a full build can."""
    marts = {name for name in order if models[name].layer == "marts"}
    known = {PER_SAMPLE_MART, *PER_SERIES_MARTS, *PER_DAY_MARTS, *PER_WEEK_MARTS}
    if marts != known:
        return None
    _select_new_samples(con, config, after=after, top=top)
    if _names_would_change(con):
        return None
    con.execute("create or replace temp table _inc_days (day date)")
    remap = {"samples": "_inc_samples"}
    created: list[Model] = []
    try:
        for name in order:
            model = models[name]
            if model.layer != "marts":
                create_model(con, model, remap)
                created.append(model)
                if name == "int_series_ids":
                    _keep_series_names(con)
            elif name == PER_SAMPLE_MART:
                _replace_sample_rows(con, model, remap)
                _settle_from_days(con)
                con.execute(
                    f"""
                    create or replace temp view _inc_window as
                    select rows.*,
                    from {PER_SAMPLE_MART} as rows
                    inner join _inc_cut
                        on _inc_cut.gpu_uuid = rows.gpu_uuid and rows.day >= _inc_cut.from_day
                    where rows.day >= (select min(from_day) from _inc_cut)
                    """
                )
                remap = {**remap, PER_SAMPLE_MART: "_inc_window"}
            elif name in PER_SERIES_MARTS:
                _replace_series_rows(con, model, remap, time_column=PER_SERIES_MARTS[name])
                con.execute(
                    """
                    create or replace temp table _inc_day_set as
                    select distinct day from _inc_days;
                    create or replace temp table _inc_weeks as
                    select distinct strftime(day, '%G-W%V') as iso_week from _inc_days;
                    """
                )
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
        con.execute(
            """
            insert or replace into build_state.series
            select
                _inc_series.gpu_uuid,
                greatest(_inc_series.gpu_name, build_state.series.gpu_name),
            from _inc_series
            left join build_state.series
                on build_state.series.gpu_uuid = _inc_series.gpu_uuid
            """
        )
        con.execute("update build_state.watermark set samples_rowid = ?, built_at = now()", [top])
    finally:
        for model in reversed(created):
            drop_model(con, model)
        for view in ("_inc_window", "_inc_gpu_team_daily"):
            con.execute(f"drop view if exists temp.{view}")
        for table in ("_inc_series", "_inc_samples", "_inc_attributed", "_inc_cut", "_inc_step"):
            con.execute(f"drop table if exists temp.{table}")
        for table in ("_inc_days", "_inc_day_set", "_inc_weeks"):
            con.execute(f"drop table if exists temp.{table}")
    assert totals is not None
    return IncrementalOutcome(series=totals[0], new_samples=int(totals[1]), days=totals[2])
