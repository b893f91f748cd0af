"""What one ingest did (`IngestResult`), and `Log`, where its progress lines go."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.console import printable
from gpufleet.warehouse.lake.compact import CompactionResult
from gpufleet.warehouse.raw.quarantine import QuarantinedFile

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    """What one ingest did; `str()` is the line the CLI prints."""

    files_loaded: int = 0
    samples_loaded: int = 0
    duplicates_skipped: int = 0
    quarantined: tuple[QuarantinedFile, ...] = ()
    batches: int = 0
    batches_read_by_duckdb: int = 0  # those with a file polars does not read (`read.py`)
    users: int = 0
    host_rules: int = 0
    price_rules: int = 0
    allocations: int = 0
    slurm_jobs: int = 0  # rows of slurm_jobs (raw/jobs/*.csv)

    references_changed: bool = False  # a reference or allocation row differs from before
    warnings: tuple[str, ...] = ()  # about edited compacted files and the reference files
    compaction: CompactionResult | None = None
    # Wall seconds of each step, in order (where the time of a slow ingest goes).
    step_seconds: tuple[tuple[str, float], ...] = ()
    # Seconds of the work done in a thread of its own while the batches load (compacted
    # files written): it overlaps the steps, so it is not part of their sum.
    alongside_seconds: tuple[tuple[str, float], ...] = ()
    # The raw location missing or unmounted, or no new file within [ingest]
    # stale_after_minutes: one line (`raw/arrival.py`); "" when the input is fine.
    input_problem: str = ""
    input_note: str = ""  # no sample files yet (nothing ever loaded): no failure
    # Files left in `date=` folders before this UTC date, past [retention] samples_days:
    # not loaded (the next build deletes them).
    expired_files: int = 0
    expired_before: dt.date | None = None
    # Files its listing named that were gone once it had the writer lock (another ingest
    # loaded them meanwhile): it listed raw/samples again.
    listed_again: int = 0

    @property
    def failures(self) -> tuple[str, ...]:
        """The lines that fail the command once the result is printed (exit status 1)."""
        return (self.input_problem,) if self.input_problem else ()

    @property
    def loaded_anything(self) -> bool:
        """Whether the models' inputs changed: new samples or different reference rows."""
        return self.samples_loaded > 0 or self.references_changed

    def __str__(self) -> str:
        line = (
            f"ingest: {self.files_loaded:,} files, {self.samples_loaded:,} new samples, "
            f"{self.duplicates_skipped:,} duplicates skipped, "
            f"{len(self.quarantined):,} quarantined; "
            f"refs: {self.users:,} users, {self.host_rules:,} host rules, "
            f"{self.price_rules:,} price rules, {self.allocations:,} allocations"
            + (f", {self.slurm_jobs:,} Slurm jobs" if self.slurm_jobs else "")
        )
        lines = [line]
        if self.step_seconds:
            total = sum(seconds for _, seconds in self.step_seconds)
            steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.step_seconds)
            by_duckdb = self.batches_read_by_duckdb
            read = f" ({by_duckdb} of {self.batches} batches with a file read by DuckDB)"
            lines.append(f"  {total:.1f} s: {steps}" + (read if by_duckdb else ""))
        if self.alongside_seconds:
            work = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.alongside_seconds)
            lines.append(f"  alongside the batches, in a thread: {work}")
        lines += [f"  {q}" for q in self.quarantined]
        lines += [f"  warning: {printable(warning)}" for warning in self.warnings]
        if self.input_note:
            lines.append(f"  note: {printable(self.input_note)}")
        if self.listed_again:
            lines.append(
                f"  note: another ingest loaded these files meanwhile: {self.listed_again:,} "
                "files listed were gone once the writer lock was taken (compacted or "
                "quarantined by it), so raw/samples was listed again"
            )
        if self.expired_files:
            lines.append(
                f"  note: {self.expired_files:,} files in date= folders before "
                f"{self.expired_before} not loaded: those days are past [retention] "
                "samples_days (the next build deletes them)"
            )
        if self.compaction is not None and self.compaction.partitions:
            lines.append(str(self.compaction))
        return "\n".join(lines)
