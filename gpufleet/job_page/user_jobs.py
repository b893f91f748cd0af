"""One user's jobs (`gpufleet job --user USER`): their rows of job_efficiency in a window,
as text or JSON."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from gpufleet.analyst import ReadOnlyWarehouse
from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.job_page.records import iso_in
from gpufleet.job_page.text import aligned, local_time, memory, name_or_dash, percent, usd

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
                key: iso_in(value, ZoneInfo(self.config.site_timezone(row["cluster"])))
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
                name_or_dash(row["cluster"]),
                name_or_dash(row["gpu_name"]),
                name_or_dash(row["state"]),
                _local(row["start_ts"], row["cluster"], self.config),
                _local(row["end_ts"], row["cluster"], self.config) or "running",
                str(row["gpus"]),
                f"{row['gpu_hours']:.2f}",
                percent(row["avg_util_pct"]),
                f"{row['waste_gpu_hours']:.2f}",
                usd(row["waste_usd"] or 0.0),
                memory(row["max_mem_used_bytes"], row["mem_total_bytes"]),
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
    return local_time(value, ZoneInfo(config.site_timezone(cluster)), "%Y-%m-%d %H:%M %Z")


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
