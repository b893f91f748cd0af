"""`record_interrupted_swaps` (`gpufleet/warehouse/lake/interrupted.py`) on the host-days
of a normal ingest, where no swap waits to be recorded: its cost, and that it leaves
`loaded_files` as it is (the crash itself: tests/test_compact_crash.py)."""

from __future__ import annotations

import datetime as dt
import resource
from pathlib import Path

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.lake.interrupted import record_interrupted_swaps

HOSTS = 1000
FIRST = dt.date(2026, 1, 1)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _warehouse(days: int, files_a_day: int) -> tuple[duckdb.DuckDBPyConnection, list[SampleFile]]:
    """A fleet's loaded_files: each host-day before the last compacted and recorded as
    found, the last one's collector files recorded; the listing: ten days' compacted files
    (the cost of the rest of a listing does not depend on loaded_files)."""
    paths: list[str] = []
    for offset in range(days):
        day = FIRST + dt.timedelta(days=offset)
        for host in range(HOSTS):
            folder = f"raw/samples/date={day}/host=node-{host:04d}"
            if offset < days - 1:
                paths.append(f"{folder}/compacted-{day}.parquet")
            else:
                paths += [f"{folder}/{n:04d}.parquet" for n in range(files_a_day)]
    listed = [SampleFile(path, 1000, 5) for path in paths[: HOSTS * 10]]
    con = duckdb.connect()
    ensure_raw_tables(con)
    con.register("_paths", pa.table({"path": pa.array(paths, pa.string())}))
    con.execute(
        "insert into loaded_files (path, size_bytes, mtime_ns, row_count, loaded_at)"
        " select path, 1000, 5, 10, now() from _paths"
    )
    con.unregister("_paths")
    return con, listed


def test_a_normal_ingest_pays_one_lookup_by_path_not_a_scan_of_loaded_files(
    tmp_path: Path,
) -> None:
    """Every listed compacted file recorded as found: nothing to record, at well under the
    cost of reading each loaded_files row's folder once (the join that finds the folders
    to look at, which it needs only for a compacted file not recorded as found)."""
    con, listed = _warehouse(days=60, files_a_day=288)
    before = con.execute("select * from loaded_files order by path").fetchall()
    config = Config(data_dir=tmp_path)
    record_interrupted_swaps(con, config, listed)  # warm
    started = _cpu_s()
    for _ in range(3):
        assert record_interrupted_swaps(con, config, listed) == 0
    spent = _cpu_s() - started
    started = _cpu_s()
    for _ in range(3):
        con.execute(
            "select count(distinct regexp_extract(path, '^(.*)/[^/]+$', 1)) from loaded_files"
        ).fetchone()
    scan = _cpu_s() - started
    assert spent < scan / 4, (spent, scan)
    assert con.execute("select * from loaded_files order by path").fetchall() == before
