"""One partition of a fanned-out full build, as a Dask worker runs it (no Prefect here).

A partition is a range of GPUs (by gpu_uuid). The pipeline host writes what it needs as
Parquet in a scratch folder (`fanout.py`); the worker opens its own in-memory DuckDB, loads
those files, reads the range's samples from the lake's files where they lie, runs the
per-series models' SQL and writes each model's rows as `<model>-<index>.parquet` in the
partition's output folder. The name is the same on every try and the file appears whole
(written beside it, then renamed): a retried partition replaces it with the same rows, and
no partition reads another's output.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.warehouse.base.connect import Setting, connect
from gpufleet.warehouse.base.sql_text import literal


@dataclass(frozen=True, kw_only=True)
class Partition:
    """What a worker needs to build one GPU range: plain values, sent to it by pickle."""

    index: int  # 0-based
    count: int  # partitions in the build
    first_uuid: str
    last_uuid: str
    output_dir: str  # absolute; the worker writes `<model>-<index>.parquet` here
    temp_dir: str  # where the worker's DuckDB spills
    # (statement, parameters) run first, in order: settings, variables, macros, the inputs
    setup: tuple[tuple[str, tuple[object, ...]], ...]
    models: tuple[tuple[str, str], ...]  # (model, select), built in order
    threads: int | None = None  # DuckDB threads on the worker (None: its cores)
    memory_limit: str | None = None  # DuckDB's memory limit on the worker (None: its default)

    @property
    def label(self) -> str:
        return (
            f"partition {self.index + 1} of {self.count} "
            f"(GPUs {self.first_uuid} .. {self.last_uuid})"
        )

    def output_path(self, model: str) -> Path:
        return Path(self.output_dir) / f"{model}-{self.index:05d}.parquet"


@dataclass(frozen=True, kw_only=True)
class PartitionResult:
    """What a partition wrote: each model's file, rows and bytes, and the worker's time."""

    index: int
    seconds: float
    cpu_seconds: float = 0.0  # the worker process's, DuckDB's threads included
    rows: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    worker: str = ""  # host:pid of the process that ran it


def run_partition(partition: Partition) -> PartitionResult:
    """Build the partition's models in a DuckDB of its own and write them as Parquet."""
    started, started_cpu = time.perf_counter(), time.process_time()
    # Never the build's own folder: a build that failed has removed it, and a task still
    # running on a remote worker then fails here instead of leaving files behind.
    for folder in (Path(partition.output_dir), Path(partition.temp_dir).parent):
        folder.mkdir(exist_ok=True)
    Path(partition.temp_dir).mkdir(exist_ok=True)
    settings: dict[str, Setting] = {"temp_directory": partition.temp_dir}
    if partition.threads:
        settings["threads"] = partition.threads
    if partition.memory_limit:
        settings["memory_limit"] = partition.memory_limit
    rows: dict[str, int] = {}
    written: dict[str, int] = {}
    with connect(":memory:", config=settings) as con:
        con.execute("set enable_progress_bar = false")  # a worker's log is no terminal
        for statement, parameters in partition.setup:
            con.execute(statement, list(parameters))
        for name, select in partition.models:
            con.execute(f"create table {name} as\n{select}")
            path = partition.output_path(name)
            part = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
            con.execute(f"copy {name} to {literal(str(part))} (format parquet)")
            os.replace(part, path)  # whole or not there: a retry writes the same name
            row = con.execute(f"select count(*) from {name}").fetchone()
            rows[name] = int(row[0]) if row else 0
            written[name] = path.stat().st_size
    return PartitionResult(
        index=partition.index,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - started_cpu,
        rows=rows,
        bytes=written,
        worker=f"{os.uname().nodename}:{os.getpid()}",
    )
