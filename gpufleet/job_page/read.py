"""A job's page from the published warehouse, read-only, in one sandboxed connection
(`gpufleet.sandbox.connect_sandboxed`): the job's rows of `job_efficiency` (its figures),
of `gpu_hourly` (each GPU's hours), of `run_pieces` with `idle_episodes` (its idle
stretches) and of `samples_attributed` (each GPU's index)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import duckdb

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError
from gpufleet.job_page.records import GpuHour, IdleStretch, JobGpu, JobPage, max_present
from gpufleet.sandbox import connect_sandboxed
from gpufleet.sites import check_site


def load_job_page(config: Config, job_id: str, *, cluster: str | None = None) -> JobPage:
    """The page of job `job_id` (at site `cluster`, needed when the id ran at several), or a
    GpufleetError naming what is missing."""
    with connect_sandboxed(config) as con:
        columns = _columns(con, "job_efficiency")
        if not columns:
            raise GpufleetError(
                "the warehouse has no table job_efficiency yet: run 'gpufleet build'"
            )
        if cluster is not None:
            check_site(con, config, cluster)
        rows = _dicts(
            con,
            "select * from job_efficiency where job_id = $job "
            "and ($cluster is null or cluster = $cluster) order by gpu_name nulls last",
            {"job": job_id, "cluster": cluster},
        )
        if not rows:
            where = "" if cluster is None else f" at site {printable(cluster)}"
            raise GpufleetError(f"no job {printable(job_id)}{where} in the warehouse")
        sites = sorted({row["cluster"] for row in rows}, key=lambda site: (site is None, site))
        if len(sites) > 1:
            names = ", ".join("(none)" if site is None else printable(site) for site in sites)
            raise GpufleetError(
                f"job {printable(job_id)} ran at {len(sites)} sites ({names}): "
                "name one with --cluster"
            )
        site = sites[0]
        samples_site = _samples_site(con, job_id, site)
        gpus = _job_gpus(con, job_id, samples_site)
        stretches = _idle_stretches(con, job_id, samples_site)
    return JobPage(
        job_id=job_id,
        cluster=site,
        timezone=config.site_timezone(site),
        user=_first(rows, "user"),
        team=_first(rows, "team"),
        account=_first(rows, "account"),
        partition=_first(rows, "partition"),
        state=_first(rows, "state"),
        start_ts=_first(rows, "start_ts"),
        end_ts=_first(rows, "end_ts"),
        gpu_models=tuple(row["gpu_name"] for row in rows if row["gpu_name"] is not None),
        # an allocation's GPUs are on each model's row; else each row has its model's own
        gpus_allocated=(
            max(int(row["gpus"] or 0) for row in rows)
            if _has_allocation(rows)
            else sum(int(row["gpus"] or 0) for row in rows)
        ),
        alloc_gpu_hours=_first(rows, "alloc_gpu_hours"),  # the same on each model's row
        gpu_hours=_sum(rows, "gpu_hours"),
        busy_gpu_hours=_sum(rows, "busy_gpu_hours"),
        idle_gpu_hours=_sum(rows, "idle_gpu_hours"),
        waste_gpu_hours=_sum(rows, "waste_gpu_hours"),
        waste_usd=_sum(rows, "waste_usd"),
        max_mem_used_bytes=max_present(row["max_mem_used_bytes"] for row in rows),
        mem_total_bytes=max_present(row["mem_total_bytes"] for row in rows),
        energy_kwh=(
            None if all(row["energy_kwh"] is None for row in rows) else _sum(rows, "energy_kwh")
        ),
        avg_sm_active_pct=_sm_active_pct(rows, columns),
        idle_threshold_pct=config.idle.threshold_pct,
        waste_min_minutes=config.idle.min_minutes,
        gpus=gpus,
        idle_stretches=stretches,
    )


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> frozenset[str]:
    """The columns of a table or view of the warehouse (none: it has no such table)."""
    rows = con.execute(
        "select column_name from duckdb_columns() where database_name = current_database() "
        "and schema_name = 'main' and table_name = $table",
        {"table": table},
    ).fetchall()
    return frozenset(name for (name,) in rows)


def _dicts(
    con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, object]
) -> list[dict[str, Any]]:
    cursor = con.execute(sql, params)
    names = [column[0] for column in cursor.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _samples_site(con: duckdb.DuckDBPyConnection, job_id: str, site: str | None) -> str | None:
    """The site of the job's samples' hosts: job_efficiency's `cluster` of a job whose hosts
    have no site is its Slurm record's or allocation's, and its samples' is null."""
    found = {
        cluster
        for (cluster,) in con.execute(
            "select distinct cluster from gpu_hourly where job_id = $job", {"job": job_id}
        ).fetchall()
    }
    return site if site in found or None not in found else None


def _hourly_sm_columns(con: duckdb.DuckDBPyConnection) -> tuple[str, str]:
    """gpu_hourly's SM activity sums, or zeros where it has none (not measured)."""
    if {"activity_s", "sm_active_s"} <= _columns(con, "gpu_hourly"):
        return "coalesce(sum(activity_s), 0)", "coalesce(sum(sm_active_s), 0)"
    return "0.0", "0.0"


def _job_gpus(con: duckdb.DuckDBPyConnection, job_id: str, site: str | None) -> tuple[JobGpu, ...]:
    """The job's GPUs (by host, then index), each with its hours in time order."""
    activity, sm_active = _hourly_sm_columns(con)
    params = {"job": job_id, "site": site}
    hours = _dicts(
        con,
        f"""
        select
            gpu_uuid, host, day, hour,
            any_value(gpu_name) as gpu_name,
            sum(observed_s) / 3600 as gpu_hours,
            sum(utilization_s) / 3600 as measured_gpu_hours,
            sum(busy_s) / 3600 as busy_gpu_hours,
            sum(idle_s) / 3600 as idle_gpu_hours,
            max(max_mem_used_bytes) as max_mem_used_bytes,
            max(mem_total_bytes) as mem_total_bytes,
            min(first_ts) as first_ts,
            max(last_ts) as last_ts,
            {activity} / 3600 as activity_gpu_hours,
            {sm_active} / 3600 as sm_active_gpu_hours,
        from gpu_hourly
        where job_id = $job and cluster is not distinct from $site
        group by gpu_uuid, host, day, hour
        order by gpu_uuid, host, day, hour
        """,
        params,
    )
    indices = {
        (uuid, host): index
        for uuid, host, index in con.execute(
            "select gpu_uuid, host, arg_max(gpu_index, ts) from samples_attributed "
            "where job_id = $job and cluster is not distinct from $site group by all",
            params,
        ).fetchall()
    }
    by_gpu: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in hours:
        by_gpu.setdefault((row["gpu_uuid"], row["host"]), []).append(row)
    gpus = [
        JobGpu(
            host=host,
            gpu_index=indices.get((uuid, host)),
            gpu_uuid=uuid,
            gpu_name=rows[0]["gpu_name"],
            mem_total_bytes=max_present(row["mem_total_bytes"] for row in rows),
            first_ts=min(row["first_ts"] for row in rows),
            last_ts=max(row["last_ts"] for row in rows),
            hours=tuple(
                GpuHour(
                    day=row["day"],
                    hour=int(row["hour"]),
                    gpu_hours=float(row["gpu_hours"]),
                    measured_gpu_hours=float(row["measured_gpu_hours"]),
                    busy_gpu_hours=float(row["busy_gpu_hours"]),
                    idle_gpu_hours=float(row["idle_gpu_hours"]),
                    max_mem_used_bytes=row["max_mem_used_bytes"],
                    activity_gpu_hours=float(row["activity_gpu_hours"]),
                    sm_active_gpu_hours=float(row["sm_active_gpu_hours"]),
                )
                for row in rows
            ),
        )
        for (uuid, host), rows in by_gpu.items()
    ]
    return tuple(
        sorted(gpus, key=lambda gpu: (gpu.host, gpu.gpu_index is None, gpu.gpu_index or 0))
    )


def _idle_stretches(
    con: duckdb.DuckDBPyConnection, job_id: str, site: str | None
) -> tuple[IdleStretch, ...]:
    """The job's pieces of idle runs (run_pieces), one stretch per idle episode and GPU,
    with the episode's waste flag and the stretch's share of its cost: the figures
    job_efficiency sums into the job's waste."""
    rows = con.execute(
        """
        select
            pieces.host,
            arg_min(pieces.first_gpu_index, pieces.first_ts) as gpu_index,
            pieces.gpu_uuid,
            arg_min(
                pieces.first_ts - to_microseconds((pieces.first_interval_s * 1e6)::bigint),
                pieces.first_ts
            ) as start_ts,
            max(pieces.last_ts) as end_ts,
            sum(pieces.seconds) as idle_seconds,
            coalesce(bool_or(episodes.is_waste), false) as is_waste,
            coalesce(
                sum(episodes.waste_usd * pieces.seconds / episodes.idle_seconds)
                    filter (where episodes.is_waste),
                0.0
            ) as waste_usd,
        from run_pieces as pieces
        left join idle_episodes as episodes
            on episodes.gpu_uuid = pieces.gpu_uuid
            and episodes.episode_id
                = (hash(pieces.gpu_uuid, pieces.idle_run_start_ts) >> 1)::bigint
        where pieces.idle_run_start_ts is not null
            and pieces.first_job_id = $job
            and pieces.cluster is not distinct from $site
        group by pieces.host, pieces.gpu_uuid, pieces.idle_run_start_ts
        order by start_ts, pieces.host, gpu_index
        """,
        {"job": job_id, "site": site},
    ).fetchall()
    return tuple(
        IdleStretch(
            host=host,
            gpu_index=index,
            gpu_uuid=uuid,
            start_ts=start,
            end_ts=end,
            idle_seconds=float(seconds),
            is_waste=bool(waste),
            waste_usd=float(usd),
        )
        for host, index, uuid, start, end, seconds, waste, usd in rows
    )


def _has_allocation(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether job_efficiency's `gpus` is the job's allocation (the same on each model's
    row) rather than each model's GPUs with samples: several rows agreeing."""
    return len(rows) > 1 and len({row["gpus"] for row in rows}) == 1


def _sm_active_pct(rows: Sequence[Mapping[str, Any]], columns: frozenset[str]) -> float | None:
    """job_efficiency's avg_sm_active_pct over the job's GPU models (weighted by the hours
    measured where the mart has them, else by GPU-hours); None where it is not measured."""
    if "avg_sm_active_pct" not in columns:
        return None
    weight = "activity_gpu_hours" if "activity_gpu_hours" in columns else "gpu_hours"
    measured = [
        (float(row["avg_sm_active_pct"]), float(row[weight] or 0))
        for row in rows
        if row["avg_sm_active_pct"] is not None
    ]
    if not measured:
        return None
    total = sum(hours for _, hours in measured)
    if total == 0:
        return measured[0][0]
    return sum(pct * hours for pct, hours in measured) / total


def _sum(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    return float(sum(row[key] or 0 for row in rows))


def _first(rows: Sequence[Mapping[str, Any]], key: str) -> Any:
    return next((row[key] for row in rows if row[key] is not None), None)
