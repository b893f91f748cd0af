"""The checks of a configuration once read: each value in its range, each address and URL
well formed (`check_values`, with `check_compute` for `[compute] dask` and `sources.py`'s
checks of the sources), and a date key's value (`read_day`). A bad value is one
GpufleetError naming the file, the line and the key (docs/reference.md#configuration)."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Callable
from pathlib import Path

from gpufleet.addresses import is_address
from gpufleet.config.model import LOCAL_WORKERS, SCHEDULER_ADDRESS, Config
from gpufleet.config.sources import check_clusters, check_prometheus, check_retention, check_s3
from gpufleet.config.toml import where_in
from gpufleet.errors import GpufleetError

# The most clock skew a sample may have: beyond a year no clock is wrong but the sample.
MAX_CLOCK_SKEW_MINUTES = 366 * 24 * 60


def check_values(config: Config, path: Path | None, text: str) -> None:
    def fail(section: str | None, key: str, problem: str) -> GpufleetError:
        where = where_in(path, text, section, key) if path else "configuration"
        return GpufleetError(f"{where}: {problem}")

    # The canonical IANA names only: aliases such as 'posix/Europe/Berlin' or 'localtime'
    # load in zoneinfo but not in DuckDB's ICU, where the models convert days.
    if config.timezone != "UTC" and (
        config.timezone == "localtime" or config.timezone not in zoneinfo.available_timezones()
    ):
        raise fail(None, "timezone", f"unknown time zone '{config.timezone}'")
    if not 0 < config.idle.threshold_pct <= 100:
        raise fail("idle", "threshold_pct", "'idle.threshold_pct' must be in (0, 100]")
    if config.idle.min_minutes < 0:
        raise fail("idle", "min_minutes", "'idle.min_minutes' must be >= 0")
    if config.series.max_gap_factor < 1:
        raise fail("series", "max_gap_factor", "'series.max_gap_factor' must be >= 1")
    if not 0 < config.smtp.port < 65536:
        raise fail("smtp", "port", "'smtp.port' must be between 1 and 65535")
    if not 0 <= config.notify.min_waste_gpu_hours < float("inf"):
        raise fail(
            "notify", "min_waste_gpu_hours", "'notify.min_waste_gpu_hours' must be a number >= 0"
        )
    if config.ingest.stale_after_minutes < 0:
        raise fail(
            "ingest",
            "stale_after_minutes",
            "'ingest.stale_after_minutes' must be >= 0 (0 turns the check off)",
        )
    if not 0 <= config.ingest.max_clock_skew_minutes <= MAX_CLOCK_SKEW_MINUTES:
        raise fail(
            "ingest",
            "max_clock_skew_minutes",
            "'ingest.max_clock_skew_minutes' must be between 0 and "
            f"{MAX_CLOCK_SKEW_MINUTES} (a year)",
        )
    if config.ingest.earliest > dt.datetime.now(dt.UTC).date():
        raise fail(
            "ingest",
            "earliest",
            f"'ingest.earliest' must not be in the future, got {config.ingest.earliest}",
        )
    if any(not entry.strip() for entry in config.notify.opt_out):
        raise fail("notify", "opt_out", "'notify.opt_out' must not hold an empty name")
    check_prometheus(config, fail)
    check_s3(config, fail)
    check_clusters(config, fail)
    check_retention(config, fail)
    check_compute(config, fail)
    if config.slurm.team_from not in ("account", "user"):
        raise fail(
            "slurm",
            "team_from",
            f'\'slurm.team_from\' must be "account" or "user", got {config.slurm.team_from!r}',
        )
    if not is_address(config.report.sender):
        raise fail(
            "report", "sender", f"'report.sender' is not an email address: {config.report.sender!r}"
        )
    for recipient in config.report.recipients:
        if not is_address(recipient):
            raise fail(
                "report", "recipients", f"'report.recipients' holds {recipient!r}, not an address"
            )
    page_url = config.report.page_url
    if page_url and not re.fullmatch(r"https?://[^/\s]+(/[^\s]*)?", page_url):
        raise fail("report", "page_url", f"'report.page_url' is not an http(s) URL: {page_url!r}")


def check_compute(config: Config, fail: Callable[[str | None, str, str], Exception]) -> None:
    """`[compute] dask` (`fail(section, key, problem)` makes the error to raise)."""
    dask = config.compute.dask
    if dask and not (LOCAL_WORKERS.match(dask) or SCHEDULER_ADDRESS.match(dask)):
        raise fail(
            "compute",
            "dask",
            f"'compute.dask' must be empty, local:N (N worker processes here) or "
            f"tcp://host:port (a Dask scheduler), got {dask!r}",
        )


def read_day(path: Path, text: str, section: str, key: str, value: dt.date | str) -> dt.date:
    """A date key's value: a TOML date (2015-01-01) or the same as a string."""
    day: dt.date | None = None
    if isinstance(value, str):
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
            try:
                day = dt.date.fromisoformat(value.strip())
            except ValueError:
                day = None  # 2015-02-30
    elif not isinstance(value, dt.datetime):  # a TOML date, not a date and time
        day = value
    if day is None:
        shown = repr(value) if isinstance(value, str) else str(value)
        raise GpufleetError(
            f"{where_in(path, text, section, key)}: '{section}.{key}' must be a date such as "
            f"2015-01-01, got {shown}"
        )
    return day
