"""The slice an incremental build recomputes: the new samples, the cut and the window.

Temp tables `_inc_series` (series with new samples, changed allocations or changed Slurm
job records, from `since_ts` on), `_inc_samples` (what `stg_samples` reads), `_inc_cut`
(each series' local hour to replace from) and `_inc_window` (the per-sample rows from the
cut on). `docs/warehouse.md` explains why these bounds suffice.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.build.state import ALLOCATION_CHANGES_SQL, JOB_CHANGES_SQL
from gpufleet.warehouse.lake.samples import create_samples_since, lake_source, stored_held

# A job's samples may carry its id a little before the start slurmdbd records: the node's
# clock and the controller's differ (and a sample before every record of its job takes the
# team of one of them). A changed job record recomputes its GPUs from this long before.
JOB_CLOCK_SKEW = dt.timedelta(hours=1)


def from_cut(rows: str) -> str:
    """SQL: the row `rows` (with day and hour) is at or after its series' cut (_inc_cut)."""
    return (
        f"({rows}.day > _inc_cut.from_day"
        f" or ({rows}.day = _inc_cut.from_day and {rows}.hour >= _inc_cut.from_hour))"
    )


def select_new_samples(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    after: int,
    top: int,
    refs_since: dt.date | None = None,
) -> None:
    """_inc_series (series with new samples, or whose allocations or jobs changed) and
    _inc_samples (what stg_samples reads).

    A series' `since_ts` is the earliest of: its first new sample; its first sample after
    the start of an allocation added, removed or changed on its host and GPU index (on its
    host, for a row that names a MIG device or GPU by UUID); its
    first sample from the start (less JOB_CLOCK_SKEW) of a Slurm job record added, removed
    or changed on one of the job's hosts (every host when the record names none), or that
    names the job (alloc_job_id, a process's job id) wherever it is; every series' first
    sample from the local midnight of `refs_since` on (dated reference rows changed), the
    earliest such midnight of the configured zone and the sites' (docs/sites.md).
    """
    refs_ts = None if refs_since is None else earliest_midnight(config, refs_since)
    _create_series(con, config, after=after, top=top, refs_ts=refs_ts)
    _create_samples(con, config)


def earliest_midnight(config: Config, day: dt.date) -> dt.datetime:
    """The first instant at which `day` begins anywhere: its local midnight in the
    configured timezone or a site's ([clusters.<site>] timezone), whichever comes first."""
    zones = {config.timezone, *(zone for _, zone in config.sites)}
    return min(dt.datetime.combine(day, dt.time(), zoneinfo.ZoneInfo(zone)) for zone in zones)


def _create_series(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    after: int,
    top: int,
    refs_ts: dt.datetime | None = None,
) -> None:
    """_inc_series: per series, `since_ts`, its GPU name, the new samples and `context_ts`."""
    con.execute(
        f"""
        create or replace temp table _inc_allocation_changes as
        {ALLOCATION_CHANGES_SQL}
        """
    )
    try:
        jobs = _job_changes(con)
        # Samples from the earliest allocation or job change on, and from the earliest
        # sample a series' first new one can be contiguous with: samples_stored and the
        # lake's files of those days.
        row = con.execute(
            "select least((select min(start_ts) from _inc_allocation_changes), $jobs, $refs)",
            {"jobs": jobs, "refs": refs_ts},
        ).fetchone()
        create_samples_since(con, config, "_inc_allocation_samples", row[0] if row else None)
        _create_series_table(
            con, config, after=after, top=top, jobs=jobs is not None, refs_ts=refs_ts
        )
    finally:
        for table in ("_inc_job_changes", "_inc_job_hosts"):
            con.execute(f"drop table if exists temp.{table}")


def _job_changes(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    """_inc_job_changes (job_id, hosts, since_ts) of the Slurm job records changed since
    the last build (a record twice when samples may name it by its raw id too), and
    _inc_job_hosts (host, since_ts) of those that name hosts; the earliest since_ts, or
    None when none changed."""
    con.execute(
        f"""
        create or replace temp table _inc_job_changes as
        with changes as ({JOB_CHANGES_SQL})
        select job_id, hosts, start_ts - to_microseconds($skew) as since_ts,
        from changes
        union all
        select job_id_raw, hosts, start_ts - to_microseconds($skew),
        from changes
        where job_id_raw is not null and job_id_raw <> job_id
        """,
        {"skew": int(JOB_CLOCK_SKEW.total_seconds() * 1_000_000)},
    )
    row = con.execute("select min(since_ts) from _inc_job_changes").fetchone()
    if row is None or row[0] is None:
        return None
    con.execute(
        """
        create or replace temp table _inc_job_hosts as
        select host, min(since_ts) as since_ts,
        from (select unnest(hosts) as host, since_ts, from _inc_job_changes)
        group by host
        """
    )
    return row[0]


# The series of the samples that a changed job record can attribute, each from its first
# such sample: on the job's hosts (on every host for a record that names none), and those
# naming the job (the collector's alloc_job_id, a process's job id) wherever they are.
_JOB_SERIES_SQL = """
            union all
            select samples.gpu_uuid, min(samples.ts), null,
                arg_min(samples.interval_s, samples.ts), 0,
            from _inc_allocation_samples as samples
            inner join _inc_job_hosts as job
                on job.host = samples.host and samples.ts >= job.since_ts
            where samples.ts >= (select min(since_ts) from _inc_job_hosts)
            group by samples.gpu_uuid
            union all
            select gpu_uuid, min(ts), null, arg_min(interval_s, ts), 0,
            from _inc_allocation_samples
            where ts >= (
                select min(since_ts) from _inc_job_changes where coalesce(len(hosts), 0) = 0
            )
            group by gpu_uuid
            union all
            select named.gpu_uuid, min(named.ts), null, arg_min(named.interval_s, named.ts), 0,
            from (
                select gpu_uuid, ts, interval_s, alloc_job_id as job_id,
                from _inc_allocation_samples
                where ts >= (select min(since_ts) from _inc_job_changes)
                    and alloc_job_id is not null
                union all
                select
                    gpu_uuid,
                    ts,
                    interval_s,
                    unnest(list_transform(processes, lambda process: process.job_id)),
                from _inc_allocation_samples
                where ts >= (select min(since_ts) from _inc_job_changes) and len(processes) > 0
            ) as named
            inner join _inc_job_changes as job
                on job.job_id = named.job_id and named.ts >= job.since_ts
            group by named.gpu_uuid"""


# Every series from its first sample at or after $refs_ts (dated reference rows changed).
_REFS_SERIES_SQL = """
            union all
            select gpu_uuid, min(ts), null, arg_min(interval_s, ts), 0,
            from _inc_allocation_samples
            where ts >= $refs_ts
            group by gpu_uuid"""


def _create_series_table(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    after: int,
    top: int,
    jobs: bool,
    refs_ts: dt.datetime | None = None,
) -> None:
    parameters: dict[str, object] = {
        "gap_factor": config.series.max_gap_factor,
        "after": after,
        "top": top,
    }
    if refs_ts is not None:
        parameters["refs_ts"] = refs_ts
    con.execute(
        f"""
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
            {_new_lake_series(con, config, after=after, top=top)}
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
                -- a row naming a MIG device or GPU by UUID: every GPU of its host (a few
                -- more series than it attributes, whatever its gpu_index says)
                and (allocation.gpu_uuid is not null or allocation.gpu_index = samples.gpu_index)
                and samples.ts > allocation.start_ts
            where samples.ts > (select min(start_ts) from _inc_allocation_changes)
            group by samples.gpu_uuid
            {_JOB_SERIES_SQL if jobs else ""}
            {_REFS_SERIES_SQL if refs_ts is not None else ""}
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
        parameters,
    )


def _new_lake_series(
    con: duckdb.DuckDBPyConnection, config: Config, *, after: int, top: int
) -> str:
    """SQL (`union all` ...) of each series' new samples in the files that ingests after
    `after` put straight into the lake, as `_create_series` counts them; '' if none."""
    rows = con.execute(
        "select path, sample_columns from build_state.lake_files"
        " where load_id > $after and load_id <= $top",
        {"after": after, "top": top},
    ).fetchall()
    if not rows:
        return ""
    root = config.data_dir.absolute()
    files = {str(root / path): stored_held(held) for path, held in rows}
    return f"""
            union all
            select gpu_uuid, min(ts), max(gpu_name), max(interval_s), count(*),
            from ({lake_source(files)})
            group by gpu_uuid"""


def _create_samples(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """_inc_samples: each series' samples from since_ts on, and the one before that can be
    contiguous with the first of them."""
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


def names_would_change(con: duckdb.DuckDBPyConnection) -> bool:
    """A series' GPU name is the max over its samples; a larger new one renames old rows."""
    row = con.execute(
        """
        select count(*) from _inc_series
        inner join build_state.series on build_state.series.gpu_uuid = _inc_series.gpu_uuid
        where _inc_series.gpu_name > coalesce(build_state.series.gpu_name, '')
        """
    ).fetchone()
    return bool(row and row[0])


def keep_series_names(con: duckdb.DuckDBPyConnection) -> None:
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


def create_window(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """_inc_cut (each series' local day and hour of since_ts, from _inc_series_ids: those of
    its sample at since_ts as just built, in its site's zone, else since_ts's in the
    configured zone) and _inc_window (the series' rows of the per-sample table `table`
    from the cut on)."""
    con.execute(
        f"""
        create or replace temp table _inc_cut as
        select
            series.gpu_uuid,
            series.series_id,
            coalesce(built.local.day, series.local_ts::date) as from_day,
            coalesce(built.local.hour, hour(series.local_ts)) as from_hour,
        from (
            select
                gpu_uuid,
                series_id,
                since_ts,
                timezone(getvariable('timezone'), since_ts) as local_ts,
            from _inc_series_ids
        ) as series
        left join (
            select
                rows.series_id,
                arg_min({{'day': rows.day, 'hour': rows.hour}}, rows.ts) as local,
            from _inc_attributed as rows
            inner join _inc_series_ids
                on _inc_series_ids.series_id = rows.series_id
                and rows.ts >= _inc_series_ids.since_ts
            group by rows.series_id
        ) as built on built.series_id = series.series_id;
        create or replace temp view _inc_window as
        select rows.*,
        from {table} as rows
        inner join _inc_cut
            on _inc_cut.series_id = rows.series_id and {from_cut("rows")}
        where rows.day >= (select min(from_day) from _inc_cut);
        """
    )


def window_is_a_suffix(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Whether each series' window (its rows of `table` from the cut on) is all its rows
    from the window's first sample on. Local (day, hour) almost never goes back as time goes
    on (an hour repeated when clocks go back an hour is one hour here too), but where clocks
    go back two hours, or across midnight, a later sample can fall before the cut."""
    row = con.execute(
        f"""
        with starts as (
            select series_id, min(ts) as start_ts, from _inc_window group by series_id
        )
        select count(*)
        from {table} as rows
        inner join starts on starts.series_id = rows.series_id and rows.ts >= starts.start_ts
        inner join _inc_cut on _inc_cut.series_id = rows.series_id
        where not {from_cut("rows")}
            and rows.ts >= (select min(start_ts) from starts)
        """
    ).fetchone()
    return not (row and row[0])
