"""Loading new sample files batch by batch, each read ahead in a thread while one loads.

`load_samples` sets aside the files whose `date=` folder names a day outside the times a
sample may have (`values.folder_problem`), then works through the batches of the other
files not loaded yet: each batch is read in one pass whoever wrote its files, its bad files
set aside from their footers or their values (a time outside those limits among them), and
loaded straight (`read_strict`, `load_rows`); a batch of more rows than one read may hold
is read in pieces of whole files, and a larger file in slices (`sliced.py`); a batch the
one pass cannot read (a file whose data does not decode, a column polars does not cast) or
whose rows repeat a key is probed and loaded as it can be (`load_batch`), its bad files
set aside for quarantine.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest import strict
from gpufleet.warehouse.ingest.batch import BatchOutcome
from gpufleet.warehouse.ingest.fanned import LoadFanOut, adopt
from gpufleet.warehouse.ingest.files import plan_batches, record_loaded, split_new_files
from gpufleet.warehouse.ingest.footers import read_footer
from gpufleet.warehouse.ingest.quarantine import record_quarantined
from gpufleet.warehouse.ingest.result import IngestResult, Log
from gpufleet.warehouse.ingest.schemas import CONTRACT_TYPES, BatchProbe, probe_batch
from gpufleet.warehouse.ingest.sliced import load_sliced
from gpufleet.warehouse.ingest.staged import load_staged_batch
from gpufleet.warehouse.ingest.strict import Oversized, StrictRead, read_batch, read_strict
from gpufleet.warehouse.ingest.uniform import (
    load_rows,
    load_uniform_batch,
    uniform_contract_columns,
)
from gpufleet.warehouse.ingest.values import TimeLimits, folder_problem, time_limits
from gpufleet.warehouse.lake.compact_ahead import NOT_AHEAD, CompactAhead

logger = logging.getLogger("gpufleet.ingest")

# A probed batch is read (and sorted) through a connection of its own (`BatchProbe.reader`).
READER_MEMORY_LIMIT = "1GB"

# Batches read ahead, by as many threads: one thread's read leaves a core idle in its
# single-threaded steps (each file's metadata, the sort), which the other read fills.
READ_AHEAD = 2


def load_samples(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    files: Sequence[SampleFile],
    *,
    now: dt.datetime | None = None,
    progress: Log | None = None,
    ahead: CompactAhead | None = None,
    fan_out: LoadFanOut | None = None,
    limits: TimeLimits | None = None,
) -> IngestResult:
    """Load the files not loaded yet into `samples` through `con` (inside a transaction),
    writing the compacted files `ahead` asks for from the rows loaded; the batches of whole
    host-days read and written on `fan_out`'s workers when given (`fanned.py`). `limits`:
    the times a sample may have (default: `config`'s at `now`)."""
    now = now or dt.datetime.now(dt.UTC)
    limits = limits or time_limits(config.ingest, now)
    say = progress or logger.info
    started = time.perf_counter()
    new, changed = split_new_files(con, files)
    bad: dict[str, str] = {file.path: reason for file, reason in changed}
    for file in new:
        if (reason := folder_problem(file.path, limits)) is not None:
            bad[file.path] = reason
    new = [file for file in new if file.path not in bad]

    listed = time.perf_counter()
    batches = plan_batches(new)
    if batches:
        plural = "batch" if len(batches) == 1 else "batches"
        say(f"ingest: {len(new):,} new files in {len(batches)} {plural}")
    files_loaded = rows_read = rows_inserted = probed = 0
    probe_seconds = waited = 0.0
    on_workers = 0.0
    if fan_out is not None and ahead is not None:
        sending = time.perf_counter()
        left: list[list[SampleFile]] = []
        try:
            taken_all = fan_out.load(batches, ahead, limits, progress=say)
            for batch, taken in zip(batches, taken_all, strict=True):
                outcome = adopt(con, config, batch, taken, ahead) if taken else None
                if outcome is None:
                    left.append(batch)
                    continue
                record_loaded(con, outcome.loaded, now)
                files_loaded += len(outcome.loaded)
                rows_read += outcome.rows_read
                rows_inserted += outcome.rows_inserted
        except BaseException:
            fan_out.discard()
            raise
        batches = left  # refused or never sent: loaded here, as embedded
        on_workers = time.perf_counter() - sending
    # Each batch is read in a thread while the one before it loads and its compacted files
    # are written: the read keeps the cores busy that the load's own steps leave idle.
    with ThreadPoolExecutor(READ_AHEAD, thread_name_prefix="gpufleet-read") as reader:
        reads: deque[Future[StrictRead | Oversized | None]] = deque()

        def start_reading(index: int) -> None:
            if index < len(batches):
                reads.append(reader.submit(read_strict, config, batches[index], ahead, limits))

        for index in range(READ_AHEAD):
            start_reading(index)
        try:
            for number, batch in enumerate(batches, start=1):
                first = batch[0].path.split("/")
                where = printable(next((p for p in first if p.startswith("date=")), first[-1]))
                say(f"ingest: batch {number}/{len(batches)} ({len(batch):,} files, {where})")
                waiting = time.perf_counter()
                read = reads.popleft().result()
                waited += time.perf_counter() - waiting
                start_reading(number + READ_AHEAD - 1)
                outcome, seconds = _load_batch(con, config, batch, read, ahead, limits)
                del read  # its rows are loaded or written ahead
                if seconds is not None:
                    probe_seconds += seconds
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
            *((("batches on the Dask workers", on_workers),) if fan_out is not None else ()),
            ("waiting for reads", waited),
            ("batches", time.perf_counter() - listed - on_workers - waited - probe_seconds),
            ("schema probes", probe_seconds),
        ),
    )


def _load_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    read: StrictRead | Oversized | None,
    ahead: CompactAhead | None,
    limits: TimeLimits,
) -> tuple[BatchOutcome, float | None]:
    """Load a batch as it was read (in one pass, too large to read at once, or not read),
    probing it when the one pass did not do; (the outcome, the seconds its probes took,
    None when none was needed)."""
    if isinstance(read, Oversized):
        return _load_pieces(con, config, batch, ahead=ahead, limits=limits)
    outcome = _load_read(con, config, read, ahead=ahead)
    if outcome is not None:
        return outcome, None
    probing = time.perf_counter()
    outcome = _load_probed(con, config, batch, ahead=ahead, limits=limits)
    return outcome, time.perf_counter() - probing


def _load_read(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    read: StrictRead | None,
    *,
    ahead: CompactAhead | None,
) -> BatchOutcome | None:
    """Load a batch read in one pass, as `load_rows` does, with the files it set aside;
    None when it was not read so, or its rows repeat a key or one loaded before."""
    if read is None:
        return None
    outcome = (
        load_rows(
            con,
            config,
            read.files,
            read.rows,
            ahead=ahead,
            parts=read.parts,
            versions=read.versions,
        )
        if read.files
        else BatchOutcome()
    )
    if outcome is not None:
        logger.debug("ingest: %d files loaded straight, read with no probe", len(read.files))
        outcome.bad.update(read.bad)
    return outcome


def _load_pieces(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    *,
    ahead: CompactAhead | None,
    limits: TimeLimits,
) -> tuple[BatchOutcome, float | None]:
    """Load a batch of more rows than one read may hold: in pieces of whole files of at most
    `strict.MAX_ROWS_PER_READ` rows, read here one at a time, and each larger file alone,
    in slices. (The outcome, and the seconds of the probes of pieces that needed one.)"""
    limit = strict.MAX_ROWS_PER_READ
    outcome = BatchOutcome()
    probe_seconds: float | None = None
    for piece, sliced in _pieces(config, batch, limit):
        loaded: BatchOutcome | None = None
        if sliced:
            loaded = load_sliced(
                con, config, piece[0], slice_rows=limit, ahead=ahead, limits=limits
            )
        else:
            read = read_batch(config, piece, ahead, max_rows=None, limits=limits)
            assert not isinstance(read, Oversized)
            loaded = _load_read(con, config, read, ahead=ahead)
            del read
        if loaded is None:
            probing = time.perf_counter()
            loaded = _load_probed(con, config, piece, ahead=ahead, limits=limits)
            probe_seconds = (probe_seconds or 0.0) + time.perf_counter() - probing
        outcome.rows_read += loaded.rows_read
        outcome.rows_inserted += loaded.rows_inserted
        outcome.loaded += loaded.loaded
        outcome.bad.update(loaded.bad)
    return outcome, probe_seconds


def _pieces(
    config: Config, batch: Sequence[SampleFile], limit: int
) -> list[tuple[list[SampleFile], bool]]:
    """The batch as runs of whole files of at most `limit` rows together (by their footers'
    row counts), and each file of more alone, marked to be read in slices."""
    pieces: list[tuple[list[SampleFile], bool]] = []
    current: list[SampleFile] = []
    rows = 0
    for file in batch:
        path = str(config.data_dir / file.path)
        footer = read_footer(path, file.path)
        count = 0
        if footer.plan.problem is None:
            try:
                count = pq.read_metadata(path).num_rows
            except (pa.ArrowException, OSError):
                count = 0  # the piece's read sets it aside
        if count > limit and footer.plan.columns is not None:
            pieces.append(([file], True))
            continue
        if current and rows + count > limit:
            pieces.append((current, False))
            current, rows = [], 0
        current.append(file)
        rows += count
    if current:
        pieces.append((current, False))
    return pieces


def _load_probed(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    *,
    ahead: CompactAhead | None,
    limits: TimeLimits,
) -> BatchOutcome:
    """Probe a batch's files (`probe_batch`), set aside those that cannot load, and load the
    rest as they can be (`load_batch`)."""
    probe = probe_batch(config, batch, versions=ahead is not None, memory_limit=READER_MEMORY_LIMIT)
    try:
        loadable = [file for file in batch if file.path not in probe.problems]
        outcome = (
            load_batch(con, config, loadable, probe, ahead=ahead, limits=limits)
            if loadable
            else None
        )
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
    limits: TimeLimits,
) -> BatchOutcome:
    """Insert one batch's new rows into `samples`: straight from the files in the common
    case (and write the compacted files of its whole host-days `ahead` asks for), else
    staged, with bad files (a sample outside `limits` among them) set aside and duplicates
    dropped."""
    schemas = probe.schemas
    columns = uniform_contract_columns(batch, schemas)
    if columns is not None:
        parts = (
            ahead.parts(batch, schemas, set(CONTRACT_TYPES))
            if ahead is not None
            else [NOT_AHEAD] * len(batch)
        )
        outcome = load_uniform_batch(
            con, config, batch, columns, probe, ahead=ahead, parts=parts, limits=limits
        )
        if outcome is not None:
            logger.debug("ingest: %d files loaded straight from the files", len(batch))
            return outcome
    logger.debug("ingest: %d files staged", len(batch))
    return load_staged_batch(con, config, batch, schemas, ahead, limits=limits)
