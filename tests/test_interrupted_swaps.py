"""`record_interrupted_swaps` (`gpufleet/warehouse/lake/interrupted.py`) on the host-days
where no swap waits to be recorded: its cost on a normal ingest, and states it must not
take for one, which leave `loaded_files` as they are (the crash itself:
tests/test_compact_crash.py)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.config import Config
from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest import ingest, run
from gpufleet.warehouse.lake import compact
from gpufleet.warehouse.lake.interrupted import record_interrupted_swaps
from gpufleet.warehouse.raw.scan import list_sample_files
from tests.scans import ScanCounter
from tests.test_compact import DAY, loaded_files_rows, midnight, sample_rows, write_and_record

pytestmark = pytest.mark.fleet

HOSTS = 1000
FIRST = dt.date(2026, 1, 1)


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
    """Every listed compacted file recorded as found: nothing to record, in one statement
    that looks the listed files up by path (loaded_files' key), not one that works out
    every loaded_files row's folder (a regexp of each of 347,000 paths here: 0.79-0.95 CPU
    s against 0.22-0.24 for the lookup, measured by hand; the folders' join runs only for
    a compacted file not recorded as found). Counted, not timed."""
    con, listed = _warehouse(days=60, files_a_day=288)
    before = con.execute("select * from loaded_files order by path").fetchall()
    counted = ScanCounter(con, tmp_path / "profile.json")
    assert record_interrupted_swaps(counted, Config(data_dir=tmp_path), listed) == 0  # type: ignore[arg-type]
    (statement,) = counted.statements
    assert "regexp" not in statement and "loaded.path = listed.path" in statement, statement
    assert con.execute("select * from loaded_files order by path").fetchall() == before


NEXT = DAY + dt.timedelta(days=1)


def _write(config: Config, name: str, minutes: int, uuids: tuple[str, ...]) -> None:
    table = sample_rows(midnight(DAY) + dt.timedelta(minutes=minutes), 30, uuids)
    write_and_record(config, duckdb.connect(), DAY, name, table, record=False)


def _dies(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("killed after the swap")


def test_a_listing_taken_before_a_swap_its_ingest_did_not_record_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingest whose listing (taken before the writer lock) still shows the collector
    files a killed ingest has since swapped out records no swap and drops no row; the
    next ingest, listing the compacted file, records it."""
    config = Config(data_dir=tmp_path)
    _write(config, "a.parquet", 0, ("GPU-a", "GPU-b"))
    _write(config, "b.parquet", 10, ("GPU-a", "GPU-b"))
    ingest(config, today=DAY)
    recorded = loaded_files_rows(config)
    stale = list_sample_files(config)
    with monkeypatch.context() as patched:
        patched.setattr(compact, "_record", _dies)
        with pytest.raises(RuntimeError, match="killed"):
            ingest(config, today=NEXT)
    with monkeypatch.context() as patched:
        patched.setattr(run, "list_sample_files", lambda config: stale)
        late = ingest(config, today=NEXT, compact=False)
    assert (late.files_loaded, late.samples_loaded) == (0, 0)
    assert loaded_files_rows(config) == recorded
    after = ingest(config, today=NEXT)
    assert (after.files_loaded, after.samples_loaded) == (0, 0)
    (row,) = loaded_files_rows(config)
    assert row[0] == f"raw/samples/date={DAY}/host=node-1/compacted-{DAY}.parquet"
    assert row[2] == sum(item[2] for item in recorded)


@pytest.mark.parametrize("late_file", ["present", "deleted by the operator"])
def test_a_compacted_file_restored_with_another_mtime_is_not_taken_for_a_swap(
    tmp_path: Path, late_file: str
) -> None:
    """A compacted host-day with a late file recorded: its compacted file put back from a
    backup (another mtime), the late file there or deleted by hand. Not a swap: no row
    goes, nothing loads, the compacted file's row keeps its rows and content hash."""
    config = Config(data_dir=tmp_path)
    _write(config, "a.parquet", 0, ("GPU-a", "GPU-b"))
    ingest(config, today=DAY)
    ingest(config, today=NEXT)
    _write(config, "late.parquet", 0, ("GPU-c",))
    ingest(config, today=NEXT, compact=False)
    recorded = loaded_files_rows(config)
    assert [row[0].rsplit("/", 1)[-1] for row in recorded] == [
        f"compacted-{DAY}.parquet",
        "late.parquet",
    ]
    folder = config.samples_dir / f"date={DAY}" / "host=node-1"
    os.utime(folder / f"compacted-{DAY}.parquet", ns=(10**18, 10**18))
    if late_file == "deleted by the operator":
        (folder / "late.parquet").unlink()
    after = ingest(config, today=NEXT, compact=False)
    assert (after.files_loaded, after.samples_loaded) == (0, 0)
    assert loaded_files_rows(config) == recorded


@pytest.mark.parametrize("host", ["o'dd [1]*?", "a%b_c", "node-1@site-a", "o'dd@s'te [x]"])
def test_a_swap_in_a_folder_of_odd_names_is_recorded_as_any(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """Host and file names with quotes, glob and LIKE characters, a site's folder: the
    swap a killed ingest left unrecorded is recorded in their place by the next ingest."""
    config = Config(data_dir=tmp_path)
    folder = config.samples_dir / f"date={DAY}" / f"host={host}"
    folder.mkdir(parents=True)
    for name, minutes in (("a [1].parquet", 0), ("b'%_.parquet", 10)):
        table = sample_rows(midnight(DAY) + dt.timedelta(minutes=minutes), 30, ("GPU-a",))
        pq.write_table(table, folder / name)
    ingest(config, today=DAY)
    assert len(loaded_files_rows(config)) == 2
    with monkeypatch.context() as patched:
        patched.setattr(compact, "_record", _dies)
        with pytest.raises(RuntimeError, match="killed"):
            ingest(config, today=NEXT)
    after = ingest(config, today=NEXT)
    assert (after.files_loaded, after.samples_loaded, after.quarantined) == (0, 0, ())
    assert [row[:3] for row in loaded_files_rows(config)] == [
        (
            f"raw/samples/date={DAY}/host={host}/compacted-{DAY}.parquet",
            (folder / f"compacted-{DAY}.parquet").stat().st_size,
            60,
        )
    ]
