"""`gpufleet simulate`: write a realistic simulated fleet in the data directory's layout.

The simulator's entry points (`simulate_fleet`, `simulate_window`, `simulate_next_flush`)
and what they report. Sample files exactly as collectors write them
(docs/reference.md#sample-files: schema, metadata, one zstd Parquet file per host per flush
period, sorted by (gpu_uuid, ts)), plus the matching reference files and the Slurm side:
allocation files, or the saved sacct/squeue output `gpufleet import slurm` reads. The
samples carry the job holding each allocated GPU (`alloc_job_id`, `alloc_user`), as a
collector run with `--slurm-gpustat` records it.
The story it tells, scaled with the fleet size:

- shared H100 hosts running multi-GPU training jobs (busy 80-100 %),
- Jupyter notebooks holding GPU memory at 0 % for hours (idle waste with held memory),
- team-owned A100 hosts (hosts.csv) with GPUs no job uses (attributed by host),
- spare GPUs no one uses (attribution none), processes with no allocation (some owners
  not in users.csv), an inference service with a daily cycle,
- a hot rack that throttles (clock-event bits 0x20/0x40 in runs, high temperatures,
  lowered SM clocks), a host whose collector is silent for 90 minutes, and a driver
  reload (energy counters back to ~0) after a GPU fell off the bus (XID 79),
- SM, tensor and DRAM activity and PCIe/NVLink rates on the H100s (NVML GPM; null on the
  A100 and L40S hosts), with training jobs that run tiny kernels in a loop (busy GPUs,
  idle SMs); health counters, with a GPU whose uncorrected ECC count grows and one with
  rows pending remapping on the last day (GPUs to drain),
- with `mig`, some spare H100s split into MIG devices, each running a user's process.

The package's modules, in the order the story is drawn: `spec`, `models`, `teams`,
`layout`, `events`, `jobs`, `activity`, `mig`, `states`, `timelines`, `scenario`; then `noise` and
`rows` make a window's samples, `samples`, `reference` and `slurm` write the files.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.simulate.reference import write_reference_files
from gpufleet.simulate.samples import Progress, write_samples
from gpufleet.simulate.scenario import Scenario, build_scenario
from gpufleet.simulate.spec import SimulationSpec

__all__ = [
    "Progress",
    "SimulationSpec",
    "SimulationSummary",
    "scenario_for",
    "simulate_fleet",
    "simulate_next_flush",
    "simulate_window",
    "write_reference_files",
]


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
                "reference data and the Slurm side: "
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
        mig=spec.mig,
    )


def simulate_fleet(
    spec: SimulationSpec,
    *,
    data_dir: Path,
    progress: Progress | None = None,
    slurm: str = "csv",
) -> SimulationSummary:
    """Write the spec's whole span: sample files, ref/*.csv, and raw/allocations/*.csv
    (`slurm="csv"`) or the saved `sacct --json` and `squeue --json` output taken at the
    span's end, slurm/sacct.json and slurm/squeue.json (`slurm="json"`)."""
    scenario = scenario_for(spec)
    references = write_reference_files(scenario, spec, data_dir, slurm=slurm)
    files, rows = write_samples(
        scenario,
        data_dir=data_dir,
        start_us=_micros(spec.start),
        end_us=_micros(spec.end),
        flush_us=spec.flush_us,
        progress=progress,
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
    files, rows = write_samples(
        scenario,
        data_dir=data_dir,
        start_us=_micros(start),
        end_us=_micros(end),
        flush_us=spec.flush_us,
        progress=progress,
    )
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
