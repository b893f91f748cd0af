"""A team's costliest idle waste of the week, as its lead's email lists it: a job's waste
episodes that overlap in time are one row however many GPUs and hosts they are on
(`gpufleet.episode_groups`), with what frees them under the job's scheduler
(`gpufleet.schedulers`); episodes without a job group by user and host, or, for GPUs the
team has through hosts.csv (no user either), by host.

Each row has two costs: the week's part (the hours of its episodes inside the week and that
share of their cost, as `team_weekly` counts them: `queries.WEEK_WASTE`) and the whole
episodes' (`idle_episodes.waste_usd`), which differ where an episode crosses into another
week; the rows are ranked by the week's part.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from gpufleet.episode_groups import gpu_summary, overlapping, span
from gpufleet.reports import queries
from gpufleet.reports.render import format_usd
from gpufleet.schedulers import Scheduler, advice, job_label, scheduler_of, slurm_jobs_sql
from gpufleet.weeks import week_monday

TOP_GROUPS = 10
# an episode counts in full in the week when the week holds all but this many of its seconds
_WHOLE_S = 0.5


def week_episodes(con: duckdb.DuckDBPyConnection, week: str) -> pl.DataFrame:
    """Every waste episode with samples in the week: its `idle_episodes` row, the week's part
    (`week_seconds`, `week_waste_usd`) and whether `slurm_jobs` has its job."""
    monday = week_monday(week)
    sql = (
        queries.WEEK_WASTE
        + f""",
        slurm_jobs as (
            {slurm_jobs_sql(con)}
        )
        select
            waste.*,
            exists (
                select 1 from slurm_jobs
                where waste.job_id in (slurm_jobs.job_id, slurm_jobs.job_id_raw)
            ) as is_slurm_job,
        from waste
        order by waste.start_ts, waste.host, waste.gpu_index
        """
    )
    return queries.read(con, sql, {"monday": monday, "sunday": monday + dt.timedelta(days=6)})


@dataclass(frozen=True, kw_only=True)
class WasteGroup:
    """One row of the email: a job's overlapping waste episodes (or a user's, or a host's
    without a job), with their sums."""

    team: str
    user: str | None
    job_id: str | None
    scheduler: Scheduler
    is_host_owned: bool  # no user or job: GPUs the team has through hosts.csv
    gpus: tuple[tuple[str, int], ...]  # (host, index), each once
    episodes: int
    start_ts: dt.datetime
    end_ts: dt.datetime
    week_gpu_hours: float
    week_waste_usd: float
    waste_usd: float  # the whole episodes'
    crosses_week: bool  # an episode has hours outside the week
    held_memory: bool

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def gpu_list(self) -> str:
        """`node12 GPUs 0-7`."""
        return gpu_summary(self.gpus)

    @property
    def job(self) -> str:
        """`job 4807074`, `pod ml-serving/llm-0`, `no job`."""
        return job_label(self.job_id, self.scheduler)

    @property
    def who(self) -> str:
        if self.user is not None:
            return f"user {self.user}"
        if self.is_host_owned:
            return f"owned by team {self.team} through hosts.csv"
        return "no user known"

    @property
    def idle_for(self) -> str:
        """From its first episode's start to its last one's end: `6 h`."""
        return span((self.end_ts - self.start_ts).total_seconds())

    @property
    def cost(self) -> str:
        """The week's cost, and the whole episodes' where they cross into another week:
        `this week: $40 (whole episode: $60)`."""
        week = format_usd(self.week_waste_usd)
        if not self.crosses_week:
            return week
        whole = "whole episode" if self.episodes == 1 else "whole episodes"
        return f"this week: {week} ({whole}: {format_usd(self.waste_usd)})"

    @property
    def advice(self) -> str:
        return advice(self.job_id, self.scheduler)


def _key(row: Mapping[str, Any]) -> tuple[object, ...]:
    where = row.get("cluster")
    if row["job_id"] is not None:
        return ("job", row["team"], where, row["job_id"])
    return ("host", row["team"], where, row["user"], row["host"])


def _group(rows: list[dict[str, Any]]) -> WasteGroup:
    first = rows[0]
    return WasteGroup(
        team=first["team"],
        user=first["user"],
        job_id=first["job_id"],
        scheduler=scheduler_of(
            first["job_id"],
            attributed_by=first["attributed_by"],
            is_slurm_job=any(row["is_slurm_job"] for row in rows),
        ),
        is_host_owned=all(row["attributed_by"] == "host" for row in rows),
        gpus=tuple(dict.fromkeys((row["host"], row["gpu_index"]) for row in rows)),
        episodes=len(rows),
        start_ts=min(row["start_ts"] for row in rows),
        end_ts=max(row["end_ts"] for row in rows),
        week_gpu_hours=sum(row["week_seconds"] for row in rows) / 3600,
        week_waste_usd=sum(row["week_waste_usd"] for row in rows),
        waste_usd=sum(row["waste_usd"] for row in rows),
        crosses_week=any(row["idle_seconds"] - row["week_seconds"] > _WHOLE_S for row in rows),
        held_memory=any(row["held_memory"] for row in rows),
    )


def costliest_groups(episodes: pl.DataFrame, top: int = TOP_GROUPS) -> tuple[WasteGroup, ...]:
    """The `top` costliest groups of a team's `week_episodes` rows, by the week's part."""
    groups = [
        _group(rows)
        for rows in overlapping(
            episodes.iter_rows(named=True),
            key=_key,
            start=lambda row: row["start_ts"],
            end=lambda row: row["end_ts"],
        )
    ]
    groups.sort(key=lambda g: (-g.week_waste_usd, -g.week_gpu_hours, g.start_ts, g.job or ""))
    return tuple(groups[:top])
