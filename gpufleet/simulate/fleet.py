"""`gpufleet simulate`: write a realistic simulated fleet in the data directory's layout.

Sample files exactly as collectors write them (CONTRACT section 2: schema, metadata, one
zstd Parquet file per host per flush period, sorted by (gpu_uuid, ts)), plus the matching
reference files and Slurm allocations. The story it tells, scaled with the fleet size:

- shared H100 hosts running multi-GPU training jobs (busy 80-100 %),
- Jupyter notebooks holding GPU memory at 0 % for hours (idle waste with held memory),
- team-owned A100 hosts (hosts.csv) with GPUs no job uses (attributed by host),
- spare GPUs no one uses (attribution none), processes with no allocation (some owners
  not in users.csv), an inference service with a daily cycle,
- a hot rack that throttles (clock-event bits 0x20/0x40 in runs, high temperatures,
  lowered SM clocks), a host whose collector is silent for 90 minutes, and a driver
  reload (energy counters back to ~0) after a GPU fell off the bus.

Generation is vectorised per host and UTC day, so memory stays bounded whatever the fleet.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import zoneinfo
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.simulate.rows import host_window, write_host_window
from gpufleet.simulate.scenario import HostPlan, Scenario, build_scenario
from gpufleet.weeks import last_complete_week, week_monday

Progress = Callable[[str], None]
WORKERS = min(4, os.cpu_count() or 1)

USERS_HEADER = ("user", "team")
HOSTS_HEADER = ("host_glob", "team")
PRICES_HEADER = ("gpu_glob", "usd_per_gpu_hour")
ALLOCATIONS_HEADER = ("job_id", "user", "team", "host", "gpu_index", "start_ts", "end_ts")


@dataclass(frozen=True, kw_only=True)
class SimulationSpec:
    """What to simulate: the fleet, the span [start, end) and the collectors' settings."""

    gpus: int = 128
    gpus_per_host: int = 8  # the last host gets the remainder
    start: dt.datetime  # aware; the first sample's ts is at or after it
    end: dt.datetime  # aware, exclusive
    interval_s: float = 10.0
    flush_s: float = 600.0
    seed: int = 7
    timezone: str = "UTC"  # zone of the allocation timestamps and the daily cycles

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus}")
        if not 1 <= self.gpus_per_host <= 64:
            raise ValueError(f"gpus_per_host must be between 1 and 64, got {self.gpus_per_host}")
        for name, moment in (("start", self.start), ("end", self.end)):
            if moment.tzinfo is None or moment.utcoffset() is None:
                raise ValueError(f"{name} must be a timezone-aware datetime, got {moment}")
        if self.end <= self.start:
            raise ValueError(f"end ({self.end}) must be after start ({self.start})")
        if self.interval_s < 0.1:
            raise ValueError(f"interval_s must be at least 0.1 s, got {self.interval_s}")
        if round(self.interval_s * 1_000_000) % 1000:
            raise ValueError(f"interval_s must be a whole number of ms, got {self.interval_s}")
        if self.flush_s < 1:
            raise ValueError(f"flush_s must be at least 1 s, got {self.flush_s}")
        if self.interval_s > self.flush_s:
            raise ValueError(
                f"interval_s ({self.interval_s} s) must not exceed flush_s ({self.flush_s} s)"
            )
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone '{self.timezone}'") from exc

    @classmethod
    def from_cli(
        cls,
        *,
        config: Config,
        gpus: int,
        gpus_per_host: int,
        week: str | None,
        start: dt.date | None,
        days: int,
        interval_s: float,
        flush_s: float,
        seed: int,
    ) -> SimulationSpec:
        """The spec for `gpufleet simulate`: whole local days from `start`, else the Monday of
        `week`, else of the last complete week in the configured time zone."""
        tz = zoneinfo.ZoneInfo(config.timezone)
        first = start or week_monday(week or last_complete_week(config.timezone))
        try:
            return cls(
                gpus=gpus,
                gpus_per_host=gpus_per_host,
                start=dt.datetime.combine(first, dt.time(), tzinfo=tz),
                end=dt.datetime.combine(first + dt.timedelta(days=days), dt.time(), tzinfo=tz),
                interval_s=interval_s,
                flush_s=flush_s,
                seed=seed,
                timezone=config.timezone,
            )
        except ValueError as exc:
            raise GpufleetError(f"simulate: {exc}") from exc

    @property
    def hosts(self) -> int:
        return -(-self.gpus // self.gpus_per_host)

    @property
    def interval_us(self) -> int:
        return round(self.interval_s * 1_000_000)

    @property
    def flush_us(self) -> int:
        return round(self.flush_s * 1_000_000)

    @property
    def start_s(self) -> int:
        """The span's start in epoch seconds (rounded down)."""
        return int(self.start.timestamp() // 1)

    @property
    def end_s(self) -> int:
        return int(-(-self.end.timestamp() // 1))


@dataclass(frozen=True, kw_only=True)
class SimulationSummary:
    """What a simulation wrote."""

    files: int
    rows: int
    hosts: int
    gpus: int
    start: dt.datetime
    end: dt.datetime
    data_dir: Path
    reference_files: tuple[Path, ...] = field(default=())

    @property
    def days(self) -> float:
        return (self.end - self.start).total_seconds() / 86400

    def __str__(self) -> str:
        span = f"{self.start.isoformat()} to {self.end.isoformat()}"
        lines = [
            f"simulated {self.gpus:,} GPUs on {self.hosts:,} hosts for "
            f"{_duration_text(self.end - self.start)} "
            f"({span}): {self.rows:,} samples in {self.files:,} files "
            f"under {self.data_dir / 'raw' / 'samples'}"
        ]
        if self.reference_files:
            lines.append(
                "reference data and allocations: "
                + ", ".join(str(p.relative_to(self.data_dir)) for p in self.reference_files)
            )
        return "\n".join(lines)


def _duration_text(span: dt.timedelta) -> str:
    seconds = span.total_seconds()
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size or unit == "minute":
            count = round(seconds / size, 2)
            return f"{count:g} {unit}{'' if count == 1 else 's'}"
    raise AssertionError("unreachable")


def scenario_for(spec: SimulationSpec) -> Scenario:
    """The spec's scenario: the same for the same spec, whatever window is generated."""
    return build_scenario(
        seed=spec.seed,
        gpus=spec.gpus,
        gpus_per_host=spec.gpus_per_host,
        interval_us=spec.interval_us,
        span_start_s=spec.start_s,
        span_end_s=spec.end_s,
        timezone=spec.timezone,
    )


def simulate_fleet(
    spec: SimulationSpec, *, data_dir: Path, progress: Progress | None = None
) -> SimulationSummary:
    """Write the spec's whole span: sample files, ref/*.csv and raw/allocations/*.csv."""
    scenario = scenario_for(spec)
    references = write_reference_files(scenario, spec, data_dir)
    files, rows = _write_samples(
        scenario, spec, data_dir, _micros(spec.start), _micros(spec.end), progress
    )
    return SimulationSummary(
        files=files,
        rows=rows,
        hosts=spec.hosts,
        gpus=spec.gpus,
        start=spec.start,
        end=spec.end,
        data_dir=data_dir,
        reference_files=tuple(references),
    )


def simulate_window(
    spec: SimulationSpec,
    *,
    data_dir: Path,
    start: dt.datetime,
    end: dt.datetime,
    progress: Progress | None = None,
    scenario: Scenario | None = None,
) -> SimulationSummary:
    """Write only the sample files with ts in [start, end) of the spec's scenario.

    The window may lie after the span: what runs at the span's end goes on running (the
    allocations still open), and counters continue where the span's files left them.
    Pass `scenario=scenario_for(spec)` to reuse one drawn before (it takes seconds for a
    thousand GPUs).
    """
    for name, moment in (("start", start), ("end", end)):
        if moment.tzinfo is None:
            raise ValueError(f"{name} must be a timezone-aware datetime, got {moment}")
    if end <= start:
        raise ValueError(f"end ({end}) must be after start ({start})")
    if start < spec.start:
        raise ValueError(f"the window must not begin before the spec's start ({spec.start})")
    scenario = scenario or scenario_for(spec)
    files, rows = _write_samples(scenario, spec, data_dir, _micros(start), _micros(end), progress)
    return SimulationSummary(
        files=files,
        rows=rows,
        hosts=spec.hosts,
        gpus=spec.gpus,
        start=start,
        end=end,
        data_dir=data_dir,
    )


def simulate_next_flush(
    spec: SimulationSpec,
    *,
    data_dir: Path,
    flushes: int = 1,
    progress: Progress | None = None,
    scenario: Scenario | None = None,
) -> SimulationSummary:
    """Append `flushes` more flush periods of every host right after the spec's end: one
    new file per host per flush, as the collectors would write next."""
    if flushes < 1:
        raise ValueError(f"flushes must be at least 1, got {flushes}")
    end = spec.end + dt.timedelta(seconds=spec.flush_s * flushes)
    return simulate_window(
        spec, data_dir=data_dir, start=spec.end, end=end, progress=progress, scenario=scenario
    )


def _micros(moment: dt.datetime) -> int:
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _utc_days(start_us: int, end_us: int) -> list[tuple[int, int, str]]:
    """[start, end) cut at UTC midnights: (from, to, date) per day."""
    day_us = 86_400_000_000
    out = []
    t = start_us
    while t < end_us:
        stop = min(end_us, (t // day_us + 1) * day_us)
        date = dt.datetime.fromtimestamp(t // 1_000_000, dt.UTC).date().isoformat()
        out.append((t, stop, date))
        t = stop
    return out


def _write_samples(
    scenario: Scenario,
    spec: SimulationSpec,
    data_dir: Path,
    start_us: int,
    end_us: int,
    progress: Progress | None,
) -> tuple[int, int]:
    samples_dir = data_dir / "raw" / "samples"
    days = _utc_days(start_us, end_us)
    files = rows = 0

    def host_day(host: HostPlan, day_start: int, day_end: int, date: str) -> tuple[int, int]:
        window = host_window(scenario, host, day_start, day_end, spec.flush_us)
        if window is None:
            return 0, 0
        return write_host_window(samples_dir, host.name, date, window), window.table.num_rows

    # numpy and Parquet encoding release the GIL: hosts are generated and written in threads.
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for number, (day_start, day_end, date) in enumerate(days, start=1):
            jobs = [pool.submit(host_day, h, day_start, day_end, date) for h in scenario.hosts]
            for job in jobs:
                written, count = job.result()
                files += written
                rows += count
            if progress:
                progress(f"simulate: day {number}/{len(days)} ({date}) written, {files:,} files")
    return files, rows


SIMULATED_MARKER = ".simulated"  # in ref/: these reference files are simulate's own


def check_reference_files_are_simulated(data_dir: Path) -> None:
    """Refuse to overwrite reference files that `simulate` did not write (real ones)."""
    ref_dir = data_dir / "ref"
    if (ref_dir / SIMULATED_MARKER).exists():
        return
    for name in ("users.csv", "hosts.csv", "prices.csv"):
        if (ref_dir / name).exists():
            raise GpufleetError(
                f"{ref_dir / name}: exists and was not written by 'gpufleet simulate'; "
                "refusing to overwrite real reference data (simulate into another --data-dir)"
            )


def write_reference_files(scenario: Scenario, spec: SimulationSpec, data_dir: Path) -> list[Path]:
    """ref/users.csv, ref/hosts.csv, ref/prices.csv and raw/allocations/slurm-<date>.csv."""
    ref_dir = data_dir / "ref"
    check_reference_files_are_simulated(data_dir)
    ref_dir.mkdir(parents=True, exist_ok=True)
    (ref_dir / SIMULATED_MARKER).touch()
    written = [
        _write_csv(ref_dir / "users.csv", USERS_HEADER, scenario.users),
        _write_csv(ref_dir / "hosts.csv", HOSTS_HEADER, scenario.host_rules),
        _write_csv(
            ref_dir / "prices.csv",
            PRICES_HEADER,
            [(glob, f"{usd:.2f}") for glob, usd in scenario.prices],
        ),
    ]
    tz = zoneinfo.ZoneInfo(spec.timezone)

    def stamp(epoch_s: int | None) -> str:
        return "" if epoch_s is None else dt.datetime.fromtimestamp(epoch_s, tz).isoformat()

    # One export per local day, holding the allocations that started that day (the
    # first also those already running when the span began).
    by_day: dict[str, list[tuple[str, ...]]] = {}
    first_day = dt.datetime.fromtimestamp(spec.start_s, tz).date().isoformat()
    for a in scenario.allocations:
        day = max(first_day, dt.datetime.fromtimestamp(a.start_s, tz).date().isoformat())
        by_day.setdefault(day, []).append(
            (a.job_id, a.user, a.team, a.host, str(a.gpu_index), stamp(a.start_s), stamp(a.end_s))
        )
    allocations_dir = data_dir / "raw" / "allocations"
    for day, rows in sorted(by_day.items()):
        written.append(_write_csv(allocations_dir / f"slurm-{day}.csv", ALLOCATIONS_HEADER, rows))
    return written


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(temporary, path)
    return path
