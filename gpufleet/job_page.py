"""A job's own page (`gpufleet job JOBID`), as `jobstats JOBID` gives Slurm users: its GPUs,
hours, utilization (and SM activity, where measured) hour by hour, peak memory, idle
stretches and waste; and the list of one user's jobs (`gpufleet job --user USER`).

Everything is read from the published warehouse, read-only, in one sandboxed connection
(`gpufleet.analyst.connect_sandboxed`): the job's rows of `job_efficiency` (its figures),
of `gpu_hourly` (each GPU's hours), of `run_pieces` with `idle_episodes` (its idle
stretches, each its part of an idle episode, as `job_efficiency` counts its waste) and of
`samples_attributed` (each GPU's index). SM activity is shown where the marts carry it:
`job_efficiency.avg_sm_active_pct`, and `gpu_hourly.sm_active_s` over `activity_s` hour by
hour; a warehouse without those columns says "not measured".

Names (job ids, hosts, users, teams, GPU models) are untrusted: the text escapes every
character that is not printable (`gpufleet.console.printable`); the JSON keeps them exact,
escaped as JSON escapes them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import duckdb

from gpufleet.analyst import ReadOnlyWarehouse, connect_sandboxed
from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError
from gpufleet.sites import check_site

GIB = 1 << 30
# The widest sparkline: a longer job's characters stand for several hours each.
SPARK_WIDTH = 72
SPARK = "▁▂▃▄▅▆▇█"  # 0 % .. 100 %
NO_READING = "·"  # an hour without a utilization (no sample of the GPU, or none measured)
# The idle stretches the text lists (the JSON has all): every waste one, then the longest.
SHOWN_STRETCHES = 10
NOT_MEASURED = "not measured"


@dataclass(frozen=True, kw_only=True)
class GpuHour:
    """One GPU's local hour of the job (`day`, `hour` as gpu_hourly keys them)."""

    day: dt.date
    hour: int
    gpu_hours: float
    measured_gpu_hours: float  # hours of samples with a utilization
    busy_gpu_hours: float
    idle_gpu_hours: float
    max_mem_used_bytes: int | None
    activity_gpu_hours: float  # hours of samples with an SM activity (0: not measured)
    sm_active_gpu_hours: float

    @property
    def avg_util_pct(self) -> float | None:
        return _pct(self.busy_gpu_hours, self.measured_gpu_hours)

    @property
    def avg_sm_active_pct(self) -> float | None:
        return _pct(self.sm_active_gpu_hours, self.activity_gpu_hours)

    def to_json(self) -> dict[str, Any]:
        return {
            "day": self.day.isoformat(),
            "hour": self.hour,
            "gpu_hours": self.gpu_hours,
            "avg_util_pct": self.avg_util_pct,
            "avg_sm_active_pct": self.avg_sm_active_pct,
            "idle_gpu_hours": self.idle_gpu_hours,
            "max_mem_used_bytes": self.max_mem_used_bytes,
        }


@dataclass(frozen=True, kw_only=True)
class JobGpu:
    """One GPU the job's samples were on, with its hours in time order."""

    host: str
    gpu_index: int | None
    gpu_uuid: str
    gpu_name: str | None
    mem_total_bytes: int | None
    first_ts: dt.datetime
    last_ts: dt.datetime
    hours: tuple[GpuHour, ...]

    @property
    def gpu_hours(self) -> float:
        return sum(hour.gpu_hours for hour in self.hours)

    @property
    def idle_gpu_hours(self) -> float:
        return sum(hour.idle_gpu_hours for hour in self.hours)

    @property
    def avg_util_pct(self) -> float | None:
        return _pct(
            sum(hour.busy_gpu_hours for hour in self.hours),
            sum(hour.measured_gpu_hours for hour in self.hours),
        )

    @property
    def avg_sm_active_pct(self) -> float | None:
        return _pct(
            sum(hour.sm_active_gpu_hours for hour in self.hours),
            sum(hour.activity_gpu_hours for hour in self.hours),
        )

    @property
    def max_mem_used_bytes(self) -> int | None:
        return _max(hour.max_mem_used_bytes for hour in self.hours)

    @property
    def name(self) -> str:
        return _gpu_name(self.host, self.gpu_index)

    def to_json(self, zone: ZoneInfo) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu_index": self.gpu_index,
            "gpu_uuid": self.gpu_uuid,
            "gpu_name": self.gpu_name,
            "first_ts": _iso(self.first_ts, zone),
            "last_ts": _iso(self.last_ts, zone),
            "gpu_hours": self.gpu_hours,
            "avg_util_pct": self.avg_util_pct,
            "avg_sm_active_pct": self.avg_sm_active_pct,
            "idle_gpu_hours": self.idle_gpu_hours,
            "max_mem_used_bytes": self.max_mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "hours": [hour.to_json() for hour in self.hours],
        }


@dataclass(frozen=True, kw_only=True)
class IdleStretch:
    """The job's part of one idle episode of one GPU: from the start of its first idle
    sample to its last one; waste when the episode is."""

    host: str
    gpu_index: int | None
    gpu_uuid: str
    start_ts: dt.datetime
    end_ts: dt.datetime
    idle_seconds: float
    is_waste: bool
    waste_usd: float  # the stretch's share of its episode's cost (0 unless waste)

    def to_json(self, zone: ZoneInfo) -> dict[str, Any]:
        return {
            "host": self.host,
            "gpu_index": self.gpu_index,
            "gpu_uuid": self.gpu_uuid,
            "start_ts": _iso(self.start_ts, zone),
            "end_ts": _iso(self.end_ts, zone),
            "idle_seconds": self.idle_seconds,
            "is_waste": self.is_waste,
            "waste_usd": self.waste_usd,
        }


@dataclass(frozen=True, kw_only=True)
class JobPage:
    """One job at its site: job_efficiency's figures over its GPU models, its GPUs hour by
    hour, and its idle stretches."""

    job_id: str
    cluster: str | None
    timezone: str  # of the site's local days and hours
    user: str | None
    team: str | None
    account: str | None
    partition: str | None
    state: str | None
    start_ts: dt.datetime | None
    end_ts: dt.datetime | None  # None: still running
    gpu_models: tuple[str, ...]
    gpus_allocated: int
    alloc_gpu_hours: float | None
    gpu_hours: float
    busy_gpu_hours: float
    idle_gpu_hours: float
    waste_gpu_hours: float
    waste_usd: float
    max_mem_used_bytes: int | None
    mem_total_bytes: int | None
    energy_kwh: float | None
    avg_sm_active_pct: float | None  # None: not measured
    idle_threshold_pct: float
    waste_min_minutes: float
    gpus: tuple[JobGpu, ...]
    idle_stretches: tuple[IdleStretch, ...]

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def measured_gpu_hours(self) -> float:
        return sum(hour.measured_gpu_hours for gpu in self.gpus for hour in gpu.hours)

    @property
    def avg_util_pct(self) -> float | None:
        return _pct(self.busy_gpu_hours, self.measured_gpu_hours)

    def to_json(self) -> dict[str, Any]:
        zone = self.zone
        return {
            "job_id": self.job_id,
            "cluster": self.cluster,
            "timezone": self.timezone,
            "user": self.user,
            "team": self.team,
            "account": self.account,
            "partition": self.partition,
            "state": self.state,
            "start_ts": _iso(self.start_ts, zone),
            "end_ts": _iso(self.end_ts, zone),
            "gpu_models": list(self.gpu_models),
            "gpus": self.gpus_allocated,
            "alloc_gpu_hours": self.alloc_gpu_hours,
            "gpu_hours": self.gpu_hours,
            "busy_gpu_hours": self.busy_gpu_hours,
            "measured_gpu_hours": self.measured_gpu_hours,
            "avg_util_pct": self.avg_util_pct,
            "avg_sm_active_pct": self.avg_sm_active_pct,
            "idle_gpu_hours": self.idle_gpu_hours,
            "waste_gpu_hours": self.waste_gpu_hours,
            "waste_usd": self.waste_usd,
            "max_mem_used_bytes": self.max_mem_used_bytes,
            "mem_total_bytes": self.mem_total_bytes,
            "energy_kwh": self.energy_kwh,
            "idle_threshold_pct": self.idle_threshold_pct,
            "waste_min_minutes": self.waste_min_minutes,
            "gpu_list": [gpu.to_json(zone) for gpu in self.gpus],
            "idle_stretches": [stretch.to_json(zone) for stretch in self.idle_stretches],
        }

    def __str__(self) -> str:
        return "\n".join(_page_lines(self))


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
        max_mem_used_bytes=_max(row["max_mem_used_bytes"] for row in rows),
        mem_total_bytes=_max(row["mem_total_bytes"] for row in rows),
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
            mem_total_bytes=_max(row["mem_total_bytes"] for row in rows),
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


def _pct(part: float, whole: float) -> float | None:
    return 100 * part / whole if whole > 0 else None


def _max(values: Any) -> Any:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def _sum(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    return float(sum(row[key] or 0 for row in rows))


def _first(rows: Sequence[Mapping[str, Any]], key: str) -> Any:
    return next((row[key] for row in rows if row[key] is not None), None)


def _iso(value: dt.datetime | None, zone: ZoneInfo) -> str | None:
    return None if value is None else value.astimezone(zone).isoformat()


# --- the text --------------------------------------------------------------------------


def _page_lines(page: JobPage) -> list[str]:
    zone = page.zone
    site = "" if page.cluster is None else f" at site {printable(page.cluster)}"
    who = ", ".join(
        f"{label} {_name(value)}"
        for label, value in (
            ("user", page.user),
            ("team", page.team),
            ("account", page.account),
            ("partition", page.partition),
            ("state", page.state),
        )
    )
    lines = [f"job {printable(page.job_id)}{site}", f"  {who}", f"  ran {_span(page, zone)}"]
    models = ", ".join(printable(model) for model in page.gpu_models)
    gpus = (
        f"{page.gpus_allocated} ({models}), {len(page.gpus)} with samples"
        if page.gpus
        else f"{page.gpus_allocated}, none with samples"
    )
    utilization = (
        "–"
        if page.avg_util_pct is None
        else f"{page.avg_util_pct:.1f} % (busy {page.busy_gpu_hours:.2f} of "
        f"{page.measured_gpu_hours:.2f} GPU-hours with a utilization)"
    )
    sm_active = (
        NOT_MEASURED if page.avg_sm_active_pct is None else f"{page.avg_sm_active_pct:.1f} %"
    )
    share = _pct(page.idle_gpu_hours, page.gpu_hours)
    idle = f"{page.idle_gpu_hours:.2f} GPU-hours" + (
        "" if share is None else f" ({share:.0f} % of its GPU-hours)"
    )
    allocated = "" if page.alloc_gpu_hours is None else f", {page.alloc_gpu_hours:.2f} allocated"
    figures = [
        ("GPUs", gpus),
        ("GPU-hours", f"{page.gpu_hours:.2f} observed{allocated}"),
        ("GPU utilization", utilization),
        ("SM activity", sm_active),
        ("idle", f"{idle}, below {page.idle_threshold_pct:g} % utilization"),
        (
            "waste",
            f"{page.waste_gpu_hours:.2f} GPU-hours, {_usd(page.waste_usd)} "
            f"(idle stretches of {page.waste_min_minutes:g} min or more)",
        ),
        ("memory peak", _memory(page.max_mem_used_bytes, page.mem_total_bytes)),
        ("energy", "–" if page.energy_kwh is None else f"{page.energy_kwh:.2f} kWh"),
    ]
    lines += ["", *(f"  {label:<16} {value}" for label, value in figures)]
    if page.gpus:
        lines += ["", *_gpu_table(page)]
        lines += ["", *_sparklines(page)]
    else:
        lines += ["", "No samples of this job: its GPUs are not known."]
    lines += ["", *_stretch_lines(page, zone)]
    return lines


def _gpu_name(host: str, gpu_index: int | None) -> str:
    """`host GPU index`, printable."""
    return f"{printable(host)} GPU {'?' if gpu_index is None else gpu_index}"


def _name(value: str | None) -> str:
    return "–" if value is None else printable(value)


def _span(page: JobPage, zone: ZoneInfo) -> str:
    start, end = page.start_ts, page.end_ts
    if start is None:
        return "–"
    text = f"from {_time(start, zone)}"
    if end is None:
        return f"{text} ({zone.key}), still running"
    return f"{text} to {_time(end, zone)} ({zone.key}), {_duration((end - start).total_seconds())}"


def _time(value: dt.datetime, zone: ZoneInfo, pattern: str = "%a %Y-%m-%d %H:%M") -> str:
    return value.astimezone(zone).strftime(pattern)


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest:02d} min"


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _memory(used: int | None, total: int | None) -> str:
    if used is None:
        return "–"
    if not total:
        return f"{used / GIB:.1f} GiB"
    return f"{used / GIB:.1f} of {total / GIB:.0f} GiB ({100 * used / total:.0f} %)"


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} %"


def _gpu_table(page: JobPage) -> list[str]:
    rows = [
        [
            gpu.name,
            printable(gpu.gpu_uuid),
            _name(gpu.gpu_name),
            f"{gpu.gpu_hours:.2f}",
            _percent(gpu.avg_util_pct),
            NOT_MEASURED if gpu.avg_sm_active_pct is None else _percent(gpu.avg_sm_active_pct),
            f"{gpu.idle_gpu_hours:.2f}",
            _memory(gpu.max_mem_used_bytes, gpu.mem_total_bytes),
        ]
        for gpu in page.gpus
    ]
    headers = ["GPU", "uuid", "model", "GPU-hours", "util", "SM active", "idle h", "memory peak"]
    return aligned(headers, rows, right={3, 4, 5, 6})


def aligned(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: set[int]) -> list[str]:
    """`rows` under `headers` in columns two spaces apart, those in `right` right-aligned."""
    widths = [max(len(row[k]) for row in (headers, *rows)) for k in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.rjust(width) if k in right else cell.ljust(width)
            for k, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return "  " + "  ".join(padded).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def _sparklines(page: JobPage) -> list[str]:
    """Each GPU's utilization (and SM activity, where measured) over the job's local
    hours, one character an hour, or several hours when the job ran longer than
    SPARK_WIDTH hours."""
    slots = sorted({(hour.day, hour.hour) for gpu in page.gpus for hour in gpu.hours})
    first = _wall_hour(*slots[0])
    count = int((_wall_hour(*slots[-1]) - first).total_seconds() // 3600) + 1
    per_char = math.ceil(count / SPARK_WIDTH)
    unit = "an hour" if per_char == 1 else f"{per_char} hours"
    lines = [
        f"Utilization by hour, from {first.strftime('%a %Y-%m-%d %H:00')} ({page.timezone}); "
        f"one character {unit}: {SPARK[0]} 0 % to {SPARK[-1]} 100 %, {NO_READING} none",
    ]
    names = [gpu.name for gpu in page.gpus]
    width = max(len(name) for name in names)
    measured_sm = any(gpu.avg_sm_active_pct is not None for gpu in page.gpus)
    for gpu, name in zip(page.gpus, names, strict=True):
        buckets: list[list[GpuHour]] = [[] for _ in range(math.ceil(count / per_char))]
        for hour in gpu.hours:
            offset = int((_wall_hour(hour.day, hour.hour) - first).total_seconds() // 3600)
            buckets[offset // per_char].append(hour)
        util = "".join(
            _spark(_share(bucket, "busy_gpu_hours", "measured_gpu_hours")) for bucket in buckets
        )
        lines.append(f"  {name:<{width}}  util  {util}")
        if measured_sm:
            sm = "".join(
                _spark(_share(bucket, "sm_active_gpu_hours", "activity_gpu_hours"))
                for bucket in buckets
            )
            lines.append(f"  {'':<{width}}  SM    {sm}")
    if not measured_sm:
        lines.append(f"  SM activity: {NOT_MEASURED}")
    return lines


def _share(hours: Sequence[GpuHour], part: str, whole: str) -> float | None:
    """100 x the sum of one figure of `hours` over the sum of another (None: no whole)."""
    return _pct(
        sum(getattr(hour, part) for hour in hours), sum(getattr(hour, whole) for hour in hours)
    )


def _wall_hour(day: dt.date, hour: int) -> dt.datetime:
    """A local (day, hour) as a naive datetime, to count hours between two of them."""
    return dt.datetime.combine(day, dt.time(hour))


def _spark(pct: float | None) -> str:
    if pct is None:
        return NO_READING
    step = round(max(0.0, min(100.0, pct)) / 100 * (len(SPARK) - 1))
    return SPARK[step]


def _stretch_lines(page: JobPage, zone: ZoneInfo) -> list[str]:
    stretches = page.idle_stretches
    if not stretches:
        return ["Idle stretches: none"]
    # every waste stretch, then the longest others, shown in time order
    ranked = sorted(stretches, key=lambda s: (not s.is_waste, -s.idle_seconds))
    shown = sorted(ranked[:SHOWN_STRETCHES], key=lambda s: (s.start_ts, s.host))
    lines = [f"Idle stretches ({len(stretches)}; waste: {page.waste_min_minutes:g} min or more)"]
    rows = [
        [
            _gpu_name(s.host, s.gpu_index),
            f"{_time(s.start_ts, zone)} to {_time(s.end_ts, zone, '%H:%M')}",
            _duration(s.idle_seconds),
            "waste" if s.is_waste else "",
            _usd(s.waste_usd) if s.is_waste else "",
        ]
        for s in shown
    ]
    lines += aligned(["GPU", f"idle ({page.timezone})", "for", "", "cost"], rows, right={2, 4})
    rest = ranked[SHOWN_STRETCHES:]
    if rest:
        seconds = sum(s.idle_seconds for s in rest)
        lines.append(f"  and {len(rest)} shorter ones: {_duration(seconds)} in all")
    return lines


# --- a user's jobs ---------------------------------------------------------------------

LIST_COLUMNS = (
    "job_id", "cluster", "gpu_name", "state", "start_ts", "end_ts", "gpus", "gpu_hours",
    "avg_util_pct", "idle_gpu_hours", "waste_gpu_hours", "waste_usd", "max_mem_used_bytes",
    "mem_total_bytes",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class UserJobs:
    """One user's rows of job_efficiency (a job and GPU model each) in a window."""

    user: str
    window: str  # in words, for the text
    rows: tuple[dict[str, Any], ...]
    config: Config

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                key: _iso(value, ZoneInfo(self.config.site_timezone(row["cluster"])))
                if isinstance(value, dt.datetime)
                else value
                for key, value in row.items()
            }
            for row in self.rows
        ]

    def __str__(self) -> str:
        if not self.rows:
            return f"no jobs of user {printable(self.user)} {self.window} in the warehouse"
        table = [
            [
                printable(row["job_id"]),
                _name(row["cluster"]),
                _name(row["gpu_name"]),
                _name(row["state"]),
                _local(row["start_ts"], row["cluster"], self.config),
                _local(row["end_ts"], row["cluster"], self.config) or "running",
                str(row["gpus"]),
                f"{row['gpu_hours']:.2f}",
                _percent(row["avg_util_pct"]),
                f"{row['waste_gpu_hours']:.2f}",
                _usd(row["waste_usd"] or 0.0),
                _memory(row["max_mem_used_bytes"], row["mem_total_bytes"]),
            ]
            for row in self.rows
        ]
        headers = [
            "job", "site", "GPU model", "state", "start", "end", "GPUs", "GPU-hours",
            "util", "waste h", "waste", "memory peak",
        ]  # fmt: skip
        jobs = len({(row["job_id"], row["cluster"]) for row in self.rows})
        return "\n".join(
            [
                f"{jobs} job{'s' * (jobs != 1)} of user {printable(self.user)} {self.window}",
                *aligned(headers, table, right={6, 7, 8, 9, 10}),
                "",
                "A job's page: gpufleet job JOBID",
            ]
        )


def _local(value: dt.datetime | None, cluster: str | None, config: Config) -> str:
    if value is None:
        return ""
    return _time(value, ZoneInfo(config.site_timezone(cluster)), "%Y-%m-%d %H:%M %Z")


def load_user_jobs(
    config: Config,
    user: str,
    *,
    week: str | None = None,
    since: str | None = None,
    until: str | None = None,
    cluster: str | None = None,
) -> UserJobs:
    """The jobs of `user` that ran in the ISO week, or between `since` and `until` (each
    optional), at one site or all: `ReadOnlyWarehouse.jobs`'s rows."""
    frame = ReadOnlyWarehouse(config).jobs(
        week, user=user, since=since, until=until, cluster=cluster
    )
    if week is not None:
        window = f"in {week}"
    elif since is not None or until is not None:
        window = " ".join(
            f"{word} {printable(value)}"
            for word, value in (("since", since), ("until", until))
            if value is not None
        )
    else:
        window = "at any time"
    if cluster is not None:
        window += f" at site {printable(cluster)}"
    columns = [name for name in LIST_COLUMNS if name in frame.columns]
    return UserJobs(
        user=user,
        window=window,
        rows=tuple(frame.select(columns).iter_rows(named=True)),
        config=config,
    )
