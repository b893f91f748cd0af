"""One compaction task of a fanned-out ingest, as a Dask worker runs it (no Prefect here).

A task is a run of host-days (`fanout.py`). The worker opens its own in-memory DuckDB,
compacts each host-day from its collector files where they lie, as the pipeline host's own
compaction does (`compact_from_files`), and writes the file into the host-day's staging
directory, which the pipeline host made and swaps in once every task is done.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from gpufleet.errors import GpufleetError
from gpufleet.warehouse.lake.compact import compact_from_files
from gpufleet.warehouse.lake.fanout import CompactTask, CompactTaskResult


def run_compact_task(task: CompactTask) -> CompactTaskResult:
    """Compact the task's host-days, each from its files into its staging directory.

    The file's name is the same on every try and it appears whole (`write_compacted_batches`
    writes it beside, then renames it): a retried task writes the same bytes under the same
    name. A host-day whose files do not read is left to the pipeline host, as its own
    compaction leaves it (`failed`); the staging directories are the host's: a task still
    running after the ingest failed finds them gone and writes nothing."""
    started = time.perf_counter()
    Path(task.temp_dir).mkdir(exist_ok=True)  # its parent lives as long as the ingest
    settings: dict[str, str | bool | int | float | list[str]] = {"temp_directory": task.temp_dir}
    if task.threads:
        settings["threads"] = task.threads
    if task.memory_limit:
        settings["memory_limit"] = task.memory_limit
    failed: dict[str, str] = {}
    with duckdb.connect(":memory:", config=settings) as con:
        con.execute("set enable_progress_bar = false")  # a worker's log is no terminal
        con.execute("set TimeZone = ?", [task.time_zone])
        for host_day in task.host_days:
            if not Path(host_day.target).parent.is_dir():
                raise FileNotFoundError(f"{host_day.target}: the ingest is over")
            try:
                compact_from_files(
                    con,
                    list(host_day.sources),
                    Path(host_day.target),
                    replaced=dict(host_day.replaced),
                )
            except (duckdb.Error, pa.ArrowException, GpufleetError) as exc:
                text = str(exc).strip()
                failed[host_day.directory] = text.splitlines()[0] if text else type(exc).__name__
    return CompactTaskResult(
        index=task.index,
        seconds=time.perf_counter() - started,
        failed=failed,
        worker=f"{os.uname().nodename}:{os.getpid()}",
    )
