"""`gpufleet ingest`: load new raw sample files, the reference files and the allocations.

The steps, in one write transaction: validate the reference files, find and load the new
sample files batch by batch, replace the reference tables, compact completed host-days;
after the publish, move bad files to quarantine/. `docs/warehouse.md` walks through them.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.compact import CompactionResult, compact_completed_days
from gpufleet.warehouse.compact_ahead import NOT_AHEAD, CompactAhead
from gpufleet.warehouse.ingest_batch import BatchOutcome
from gpufleet.warehouse.ingest_files import (
    SampleFile,
    find_sample_files,
    plan_batches,
    record_loaded,
    split_new_files,
)
from gpufleet.warehouse.ingest_schemas import CONTRACT_TYPES, BatchProbe, probe_batch
from gpufleet.warehouse.ingest_staged import load_staged_batch
from gpufleet.warehouse.ingest_strict import StrictRead, read_strict
from gpufleet.warehouse.ingest_uniform import (
    load_rows,
    load_uniform_batch,
    uniform_contract_columns,
)
from gpufleet.warehouse.models import apply_table_docs
from gpufleet.warehouse.quarantine import (
    QuarantinedFile,
    QuarantineWarning,
    move_to_quarantine,
    record_quarantined,
)
from gpufleet.warehouse.refs import (
    References,
    published_allocation_files,
    read_references,
    replace_references,
)
from gpufleet.warehouse.slots import DEFAULT_LOCK_TIMEOUT_S, write_transaction

__all__ = [
    "IngestResult",
    "QuarantineWarning",
    "QuarantinedFile",
    "SampleFile",
    "find_sample_files",
    "ingest",
    "load_batch",
    "load_samples",
    "load_warehouse",
    "move_to_quarantine",
    "plan_batches",
]

logger = logging.getLogger("gpufleet.ingest")

# A probed batch is read (and sorted) through a connection of its own (`BatchProbe.reader`).
READER_MEMORY_LIMIT = "1GB"

Log = Callable[[str], None]
# Batches read ahead, by as many threads: one thread's read leaves a core idle in its
# single-threaded steps (each file's metadata, the sort), which the other read fills.
READ_AHEAD = 2


@dataclass(frozen=True, kw_only=True)
class IngestResult:
    """What one ingest did; `str()` is the line the CLI prints."""

    files_loaded: int = 0
    samples_loaded: int = 0
    duplicates_skipped: int = 0
    quarantined: tuple[QuarantinedFile, ...] = ()
    batches: int = 0
    batches_probed: int = 0  # the batches with a file unlike the contract's (read twice)
    users: int = 0
    host_rules: int = 0
    price_rules: int = 0
    allocations: int = 0

    references_changed: bool = False  # a reference or allocation row differs from before
    compaction: CompactionResult | None = None
    # Wall seconds of each step, in order (where the time of a slow ingest goes).
    step_seconds: tuple[tuple[str, float], ...] = ()
    # Seconds of the work done in a thread of its own while the batches load (compacted
    # files written): it overlaps the steps, so it is not part of their sum.
    alongside_seconds: tuple[tuple[str, float], ...] = ()

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
        )
        lines = [line]
        if self.step_seconds:
            total = sum(seconds for _, seconds in self.step_seconds)
            steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.step_seconds)
            probed = f" ({self.batches_probed} of {self.batches} batches probed)"
            lines.append(f"  {total:.1f} s: {steps}" + (probed if self.batches_probed else ""))
        if self.alongside_seconds:
            work = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.alongside_seconds)
            lines.append(f"  alongside the batches, in a thread: {work}")
        lines += [f"  quarantined {q.path}: {q.reason}" for q in self.quarantined]
        if self.compaction is not None and self.compaction.partitions:
            lines.append(str(self.compaction))
        return "\n".join(lines)


def ingest(
    config: Config,
    *,
    progress: Log | None = None,
    warn: Log | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    compact: bool = True,
    today: dt.date | None = None,
) -> IngestResult:
    """The whole ingest without Prefect: validate refs, load, compact, publish, quarantine
    (`warn`: where each quarantined file is reported; default: a log line and a
    QuarantineWarning)."""
    loaded = load_new_files(
        config, progress=progress, lock_timeout_s=lock_timeout_s, compact=compact, today=today
    )
    return quarantine_after_publish(config, loaded, warn=warn)


def load_new_files(
    config: Config,
    *,
    progress: Log | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    compact: bool = True,
    today: dt.date | None = None,
) -> IngestResult:
    """Validate the reference files, list the raw files and load the new ones (published
    with the warehouse transaction, or joining the caller's); moves nothing to quarantine/:
    `quarantine_after_publish` does, once the caller's transaction is published."""
    started = time.perf_counter()
    references = read_references(config, known=published_allocation_files(config))
    files = find_sample_files(config)
    listed = time.perf_counter()
    result = load_warehouse(
        config,
        references,
        files,
        progress=progress,
        lock_timeout_s=lock_timeout_s,
        compact=compact,
        today=today,
    )
    return replace(
        result,
        step_seconds=(("reference files and listing", listed - started), *result.step_seconds),
    )


def quarantine_after_publish(
    config: Config, result: IngestResult, *, warn: Log | None = None
) -> IngestResult:
    """Move the files `result` quarantined to quarantine/ and report each (after the
    publish that recorded them, so that a failed transaction moves nothing)."""
    moving = time.perf_counter()
    move_to_quarantine(config, result.quarantined, warn=warn)
    return replace(
        result,
        step_seconds=(*result.step_seconds, ("quarantine", time.perf_counter() - moving)),
    )


def load_warehouse(
    config: Config,
    references: References,
    files: Sequence[SampleFile],
    *,
    progress: Log | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    compact: bool = True,
    today: dt.date | None = None,
) -> IngestResult:
    """One write transaction: new samples, loaded/quarantined files, reference tables,
    and the compaction of host-days before `today` (UTC; default: the real today)."""
    started = time.perf_counter()
    with write_transaction(config, lock_timeout_s=lock_timeout_s) as con:
        # Capped by the writer's connection (`slots.WRITER_MEMORY_LIMIT`): DuckDB then evicts
        # the pages it has written (a week's backfill at 1,000 GPUs peaked at 2.6 GB uncapped).
        opened = time.perf_counter()
        day = today or dt.datetime.now(dt.UTC).date()
        ahead = CompactAhead.plan(config, files, day) if compact else None
        try:
            result = load_samples(con, config, files, progress=progress, ahead=ahead)
            loaded = time.perf_counter()
            references_changed = replace_references(con, references)
            allocations = con.execute("select count(*) from allocations").fetchone()
            compacting = time.perf_counter()
            compaction = (
                compact_completed_days(
                    con,
                    config,
                    exclude=[item.path for item in result.quarantined],
                    progress=progress,
                    today=day,
                    ahead=ahead,
                )
                if compact
                else None
            )
        finally:
            if ahead is not None:
                ahead.close()
        if compaction is not None and compaction.from_load:
            apply_table_docs(con, "samples")  # the view names the lake's new files
        compacted = time.perf_counter()
    steps = (
        ("opening the warehouse", opened - started),
        *result.step_seconds,
        ("reference tables", compacting - loaded),
        ("compaction", compacted - compacting),
        ("publish", time.perf_counter() - compacted),
    )
    return IngestResult(
        files_loaded=result.files_loaded,
        samples_loaded=result.samples_loaded,
        duplicates_skipped=result.duplicates_skipped,
        quarantined=result.quarantined,
        batches=result.batches,
        batches_probed=result.batches_probed,
        users=len(references.users),
        host_rules=len(references.hosts),
        price_rules=len(references.prices),
        allocations=int(allocations[0]) if allocations else 0,
        references_changed=references_changed,
        compaction=compaction,
        step_seconds=steps,
        alongside_seconds=(
            *result.alongside_seconds,
            *((("compacted files written", ahead.write_seconds),) if ahead is not None else ()),
        ),
    )


def load_samples(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    files: Sequence[SampleFile],
    *,
    now: dt.datetime | None = None,
    progress: Log | None = None,
    ahead: CompactAhead | None = None,
) -> IngestResult:
    """Load the files not loaded yet into `samples` through `con` (inside a transaction),
    writing the compacted files `ahead` asks for from the rows loaded."""
    now = now or dt.datetime.now(dt.UTC)
    say = progress or logger.info
    started = time.perf_counter()
    new, changed = split_new_files(con, files)
    bad: dict[str, str] = {file.path: reason for file, reason in changed}

    listed = time.perf_counter()
    batches = plan_batches(new)
    if batches:
        plural = "batch" if len(batches) == 1 else "batches"
        say(f"ingest: {len(new):,} new files in {len(batches)} {plural}")
    files_loaded = rows_read = rows_inserted = probed = 0
    probe_seconds = waited = 0.0
    # Each batch is read in a thread while the one before it loads and its compacted files
    # are written: the read keeps the cores busy that the load's own steps leave idle.
    with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="gpufleet-read") as reader:
        reads: deque[Future[StrictRead | None]] = deque()

        def start_reading(index: int) -> None:
            if index < len(batches):
                reads.append(reader.submit(read_strict, config, batches[index], ahead))

        for index in range(READ_AHEAD):
            start_reading(index)
        try:
            for number, batch in enumerate(batches, start=1):
                first = batch[0].path.split("/")
                where = next((p for p in first if p.startswith("date=")), first[-1])
                say(f"ingest: batch {number}/{len(batches)} ({len(batch):,} files, {where})")
                waiting = time.perf_counter()
                read = reads.popleft().result()
                waited += time.perf_counter() - waiting
                start_reading(number + READ_AHEAD - 1)
                outcome = _load_read(con, config, batch, read, ahead=ahead)
                del read  # its rows are loaded or written ahead
                if outcome is None:  # a file unlike a collector's: probe the batch
                    probing = time.perf_counter()
                    outcome = _load_probed(con, config, batch, ahead=ahead)
                    probe_seconds += time.perf_counter() - probing
                    probed += 1
                bad.update(outcome.bad)
                record_loaded(con, outcome.loaded, now)
                files_loaded += len(outcome.loaded)
                rows_read += outcome.rows_read
                rows_inserted += outcome.rows_inserted
        finally:
            for future in reads:
                future.cancel()  # a read not started when the load failed

    quarantined = record_quarantined(con, config, sorted(bad.items()), now)
    return IngestResult(
        files_loaded=files_loaded,
        samples_loaded=rows_inserted,
        duplicates_skipped=rows_read - rows_inserted,
        quarantined=quarantined,
        batches=len(batches),
        batches_probed=probed,
        step_seconds=(
            ("new files", listed - started),
            ("waiting for reads", waited),
            ("batches", time.perf_counter() - listed - waited - probe_seconds),
            ("schema probes", probe_seconds),
        ),
    )


def _load_read(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    read: StrictRead | None,
    *,
    ahead: CompactAhead | None,
) -> BatchOutcome | None:
    """Load a batch `read_strict` read (a collector's files), as `load_rows` does; None when
    it could not read it so, or its rows hold a NULL key or a repeated one."""
    if read is None:
        return None
    outcome = load_rows(
        con, config, batch, read.rows, ahead=ahead, parts=read.parts, versions=read.versions
    )
    if outcome is not None:
        logger.debug("ingest: %d files loaded straight, read with no probe", len(batch))
    return outcome


def _load_probed(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    *,
    ahead: CompactAhead | None,
) -> BatchOutcome:
    """Probe a batch's files (`probe_batch`), set aside those that cannot load, and load the
    rest as they can be (`load_batch`)."""
    probe = probe_batch(config, batch, versions=ahead is not None, memory_limit=READER_MEMORY_LIMIT)
    try:
        loadable = [file for file in batch if file.path not in probe.problems]
        outcome = load_batch(con, config, loadable, probe, ahead=ahead) if loadable else None
    finally:
        probe.reader.close()
    outcome = outcome or BatchOutcome()
    outcome.bad.update(probe.problems)
    return outcome


def load_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    probe: BatchProbe,
    *,
    ahead: CompactAhead | None = None,
) -> BatchOutcome:
    """Insert one batch's new rows into `samples`: straight from the files in the common
    case (and write the compacted files of its whole host-days `ahead` asks for), else
    staged, with bad files set aside and duplicates dropped."""
    schemas = probe.schemas
    columns = uniform_contract_columns(batch, schemas)
    if columns is not None:
        parts = (
            ahead.parts(batch, schemas, set(CONTRACT_TYPES))
            if ahead is not None
            else [NOT_AHEAD] * len(batch)
        )
        outcome = load_uniform_batch(con, config, batch, columns, probe, ahead=ahead, parts=parts)
        if outcome is not None:
            logger.debug("ingest: %d files loaded straight from the files", len(batch))
            return outcome
    logger.debug("ingest: %d files staged", len(batch))
    return load_staged_batch(con, config, batch, schemas, ahead)
