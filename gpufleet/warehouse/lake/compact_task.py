"""One compaction task of a fanned-out ingest, as a Dask worker runs it (no Prefect here).

A task is a run of host-days (`fanout.py`). The worker opens its own in-memory DuckDB,
compacts each host-day from its collector files where they lie, as the pipeline host's own
compaction does (`compact_from_files`), and writes the file into the host-day's staging
directory, which the pipeline host made and swaps in once every task is done. With the
host-days' objects in the store (`raw_location = "s3://..."`), the worker reads them from
there into a temporary folder of its own, one host-day at a time, and sends each compacted
file's bytes back instead: it touches nothing of the pipeline host's.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from gpufleet.errors import GpufleetError
from gpufleet.storage.s3 import describe_error, downloaded
from gpufleet.warehouse.base.connect import Setting, connect
from gpufleet.warehouse.base.raw_tables import literal_path
from gpufleet.warehouse.lake.compact import compact_from_files
from gpufleet.warehouse.lake.fanout import CompactTask, CompactTaskResult, HostDay


def run_compact_task(task: CompactTask) -> CompactTaskResult:
    """Compact the task's host-days, each from its files into its staging directory (or,
    read from the store, into bytes sent back).

    The file's name is the same on every try and it appears whole (`write_compacted_batches`
    writes it beside, then renames it): a retried task writes the same bytes under the same
    name. A host-day whose files do not read is left to the pipeline host, as its own
    compaction leaves it (`failed`); the staging directories are the host's: a task still
    running after the ingest failed finds them gone and writes nothing."""
    started = time.perf_counter()
    failed: dict[str, str] = {}
    files: dict[str, bytes] = {}
    with contextlib.ExitStack() as stack:
        own = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpufleet-compact-")))
        temp_dir = Path(task.temp_dir) if task.temp_dir else own / "spill"
        temp_dir.mkdir(exist_ok=True)  # its parent lives as long as the ingest
        settings: dict[str, Setting] = {"temp_directory": str(temp_dir)}
        if task.threads:
            settings["threads"] = task.threads
        if task.memory_limit:
            settings["memory_limit"] = task.memory_limit
        con = stack.enter_context(connect(":memory:", config=settings))
        con.execute("set enable_progress_bar = false")  # a worker's log is no terminal
        con.execute("set TimeZone = ?", [task.time_zone])
        for host_day in task.host_days:
            try:
                if task.store is None:
                    _compact_here(con, host_day)
                else:
                    files[host_day.directory] = _compact_from_store(con, task, host_day)
            except (duckdb.Error, pa.ArrowException, GpufleetError, OSError) as exc:
                if isinstance(exc, OSError) and task.store is None:
                    raise  # where the files lie: the machine's problem, not the files'
                text = describe_error(exc) if isinstance(exc, OSError) else str(exc).strip()
                failed[host_day.directory] = text.splitlines()[0] if text else type(exc).__name__
    return CompactTaskResult(
        index=task.index,
        seconds=time.perf_counter() - started,
        failed=failed,
        worker=f"{os.uname().nodename}:{os.getpid()}",
        files=files,
    )


def _compact_here(con: duckdb.DuckDBPyConnection, host_day: HostDay) -> None:
    """A host-day whose files lie where this worker reads them, into its staging directory."""
    if not Path(host_day.target).parent.is_dir():
        raise FileNotFoundError(f"{host_day.target}: the ingest is over")
    compact_from_files(
        con, list(host_day.sources), Path(host_day.target), replaced=dict(host_day.replaced)
    )


def _compact_from_store(
    con: duckdb.DuckDBPyConnection, task: CompactTask, host_day: HostDay
) -> bytes:
    """A host-day's compacted file's bytes, from its objects read into a folder of the
    worker's own at their paths below the data directory (a `host=H@site` folder names the
    site, as on the pipeline host)."""
    assert task.store is not None
    store = task.store
    with downloaded(host_day.objects, endpoint_url=store.endpoint_url, region=store.region) as own:
        target = own / host_day.target
        target.parent.mkdir()
        sources = [literal_path(str(own / item.relative)) for item in host_day.objects]
        compact_from_files(con, sources, target, replaced=dict(host_day.replaced))
        return target.read_bytes()
