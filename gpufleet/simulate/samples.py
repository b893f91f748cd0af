"""Writing a scenario's sample files as the collectors do: one zstd Parquet file per host per
flush window, in the `date=<UTC day>/host=<host>` partitions (docs/reference.md#sample-files).

Generation is vectorised per host and UTC day, so memory stays bounded whatever the fleet;
numpy and Parquet encoding release the GIL, so hosts are generated and written in threads.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq

from gpufleet.collectors.schema import partition_dir
from gpufleet.simulate.layout import HostPlan
from gpufleet.simulate.rows import HostWindow, host_window
from gpufleet.simulate.scenario import Scenario

Progress = Callable[[str], None]
WORKERS = min(4, os.cpu_count() or 1)
# Dictionary-encode the repetitive strings only: it halves the per-file encoding cost.
_DICTIONARY_COLUMNS = ["host", "gpu_uuid", "gpu_name", "status", "alloc_job_id", "alloc_user"]


def write_samples(
    scenario: Scenario,
    *,
    data_dir: Path,
    start_us: int,
    end_us: int,
    flush_us: int,
    progress: Progress | None,
) -> tuple[int, int]:
    """Write every host's samples with ts in [start_us, end_us); returns (files, rows)."""
    samples_dir = data_dir / "raw" / "samples"
    days = _utc_days(start_us, end_us)
    files = rows = 0

    def host_day(host: HostPlan, day_start: int, day_end: int, date: str) -> tuple[int, int]:
        window = host_window(scenario, host, day_start, day_end, flush_us)
        if window is None:
            return 0, 0
        return write_host_window(samples_dir, host.name, date, window), window.table.num_rows

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


def write_host_window(samples_dir: Path, host: str, date_iso: str, window: HostWindow) -> int:
    """Write one Parquet file per flush window, as a collector does; returns files written."""
    directory = Path(partition_dir(str(samples_dir), date_iso, host))
    directory.mkdir(parents=True, exist_ok=True)
    for first, count, start_s, end_s in window.files:
        name = f"{host}-{start_s}-{end_s}.parquet"
        temporary = directory / f".{name}.tmp"
        pq.write_table(
            window.table.slice(first, count),
            temporary,
            compression="zstd",
            compression_level=1,
            use_dictionary=_DICTIONARY_COLUMNS,
        )
        os.replace(temporary, directory / name)
    return len(window.files)


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
