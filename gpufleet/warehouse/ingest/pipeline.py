"""The one way a batch of new sample files loads: listed, read, checked, deduplicated and
inserted (docs/warehouse.md#ingest). How a batch is cut (`cut.py`: a batch too large to read
at once in pieces of whole files, a larger file in slices, `sliced.py`) and where its steps
run (here, two batches read ahead in threads; on Dask workers, `fanned.py`) are all that
differ."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import duckdb

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.integrations.pending import fetch_pending
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest import cut
from gpufleet.warehouse.ingest.check import Checked, read_and_check
from gpufleet.warehouse.ingest.fanned import LoadFanOut
from gpufleet.warehouse.ingest.insert import BatchOutcome, insert_batch
from gpufleet.warehouse.ingest.read import Oversized
from gpufleet.warehouse.ingest.result import IngestResult, Log
from gpufleet.warehouse.ingest.sliced import load_sliced
from gpufleet.warehouse.ingest.values import TimeLimits, folder_problem
from gpufleet.warehouse.lake.compact_ahead import CompactAhead
from gpufleet.warehouse.raw.loaded import record_loaded, split_new_files
from gpufleet.warehouse.raw.quarantine import record_quarantined

logger = logging.getLogger("gpufleet.ingest")

# Batches read ahead, by as many threads: one thread's read leaves a core idle in its
# single-threaded steps (each file's metadata, the sort), which the other read fills.
READ_AHEAD = 2


def load_batch(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    batch: Sequence[SampleFile],
    checked: Checked | Oversized,
    ahead: CompactAhead | None,
    limits: TimeLimits,
) -> BatchOutcome:
    """Load a batch as read and checked, or an `Oversized` one piece by piece (`cut.pieces`)."""
    if not isinstance(checked, Oversized):
        return insert_batch(con, config, checked, ahead)
    outcome = BatchOutcome()
    for piece, sliced in cut.pieces(config, batch):
        loaded = load_sliced(con, config, piece[0], ahead=ahead, limits=limits) if sliced else None
        if loaded is None:
            read = read_and_check(config, piece, ahead, limits, whole=True)
            assert not isinstance(read, Oversized)
            loaded = insert_batch(con, config, read, ahead)
            del read
        outcome.add(loaded)
    return outcome


@contextlib.contextmanager
def read_ahead(
    batches: Sequence[Sequence[SampleFile]],
    read: Callable[[Sequence[SampleFile]], Checked | Oversized],
    depth: int = READ_AHEAD,
) -> Iterator[Iterator[Future[Checked | Oversized]]]:
    """Each batch's read, while up to `depth` later reads run in as many threads; the reads
    not started are cancelled on the way out."""
    with ThreadPoolExecutor(depth, thread_name_prefix="gpufleet-read") as reader:
        reads: deque[Future[Checked | Oversized]] = deque(
            reader.submit(read, batch) for batch in batches[:depth]
        )

        def each() -> Iterator[Future[Checked | Oversized]]:
            for number in range(len(batches)):
                if number + depth < len(batches):
                    reads.append(reader.submit(read, batches[number + depth]))
                yield reads.popleft()

        try:
            yield each()
        finally:
            for future in reads:
                future.cancel()  # a read not started when the load failed


def load_samples(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    files: Sequence[SampleFile],
    *,
    progress: Log | None,
    ahead: CompactAhead | None,
    fan_out: LoadFanOut | None,
    limits: TimeLimits,
) -> IngestResult:
    """Load the files not loaded yet into `samples` through `con` (inside a transaction),
    writing the compacted files `ahead` asks for from the rows loaded; the batches of whole
    host-days read and written on `fan_out`'s workers when given (`fanned.py`). `limits`:
    the times a sample may have."""
    now = dt.datetime.now(dt.UTC)
    say = progress or logger.info
    started = time.perf_counter()
    new, changed = split_new_files(con, files)
    bad: dict[str, str] = {file.path: reason for file, reason in changed}
    for file in new:
        if (reason := folder_problem(file.path, limits)) is not None:
            bad[file.path] = reason
    new = [file for file in new if file.path not in bad]

    listed = time.perf_counter()
    batches = cut.plan_batches(new)
    if batches:
        plural = "batch" if len(batches) == 1 else "batches"
        say(f"ingest: {len(new):,} new files in {len(batches)} {plural}")
    total = BatchOutcome(bad=bad)
    by_duckdb = 0
    waited = on_workers = 0.0

    def add(outcome: BatchOutcome) -> None:
        record_loaded(con, config, outcome.loaded, now)
        total.add(outcome)

    if fan_out is not None and ahead is not None:
        sending = time.perf_counter()
        left: list[list[SampleFile]] = []
        try:
            taken_all = fan_out.load(batches, ahead, limits, progress=say)
            for batch, taken in zip(batches, taken_all, strict=True):
                outcome = fan_out.adopt(con, taken, ahead) if taken else None
                if outcome is None:
                    left.append(batch)
                else:
                    add(outcome)
        except BaseException:
            fan_out.discard()
            raise
        batches = left  # refused or never sent: loaded here, as embedded
        on_workers = time.perf_counter() - sending
    fetch_pending(config, (file.path for batch in batches for file in batch))  # in the store

    with read_ahead(batches, partial(read_and_check, config, ahead=ahead, limits=limits)) as reads:
        for number, (batch, future) in enumerate(zip(batches, reads, strict=True), start=1):
            first = batch[0].path.split("/")
            where = printable(next((p for p in first if p.startswith("date=")), first[-1]))
            say(f"ingest: batch {number}/{len(batches)} ({len(batch):,} files, {where})")
            waiting = time.perf_counter()
            checked = future.result()
            waited += time.perf_counter() - waiting
            by_duckdb += isinstance(checked, Checked) and checked.by_duckdb
            add(load_batch(con, config, batch, checked, ahead, limits))
            del checked, future  # its rows are loaded or written ahead

    quarantined = record_quarantined(con, config, sorted(total.bad.items()), now)
    return IngestResult(
        files_loaded=len(total.loaded),
        samples_loaded=total.rows_inserted,
        duplicates_skipped=total.rows_read - total.rows_inserted,
        quarantined=quarantined,
        batches=len(batches),
        batches_read_by_duckdb=by_duckdb,
        step_seconds=(
            ("new files", listed - started),
            *((("batches on the Dask workers", on_workers),) if fan_out is not None else ()),
            ("waiting for reads", waited),
            ("batches", time.perf_counter() - listed - on_workers - waited),
        ),
    )
