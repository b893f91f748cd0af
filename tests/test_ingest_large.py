"""Batches of more rows than one read may hold (`cut.MAX_ROWS_PER_READ`): read in pieces
of whole files, and a larger file in slices, in bounded memory; the rows loaded, the files
set aside and the compacted files are those of a whole read. The limit is scaled down
here; the 5-million-row file of issue 38 is measured by hand (bench/large_file.py)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.large_file import large_table, write_large_file
from gpufleet.config import Config
from gpufleet.warehouse.ingest import QuarantineWarning, cut, ingest, sliced
from gpufleet.warehouse.ingest.read import cast_slice
from tests.test_ingest import query, sample, write_samples

DAY = dt.date(2026, 11, 16)
TODAY = DAY + dt.timedelta(days=1)
BIG = f"raw/samples/date={DAY}/host=big/big.parquet"
EVERYTHING = "select * exclude (processes), processes::varchar from samples order by gpu_uuid, ts"


ROWS = 10_000  # a file of three reads and more (`small_reads`), two GPUs


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """`large_table(ROWS)` as one file ingested with no limit (one whole read): what the
    tests' files of those rows must load as. Made once for the module, and only read."""
    twin = Config(data_dir=tmp_path_factory.mktemp("whole") / "data")
    (twin.data_dir / BIG).parent.mkdir(parents=True)
    pq.write_table(large_table(ROWS, DAY), twin.data_dir / BIG)
    ingest(twin, today=TODAY)
    return twin


@pytest.fixture
def small_reads(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(cut, "MAX_ROWS_PER_READ", 3000)
    return 3000


def test_a_file_larger_than_a_read_is_written_ahead_in_slices(
    config: Config, whole: Config, small_reads: int
) -> None:
    table = large_table(ROWS, DAY)  # two GPUs, in (gpu_uuid, ts) order
    path = config.data_dir / BIG
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, row_group_size=7000)
    result = ingest(config, today=TODAY)
    assert (result.samples_loaded, result.quarantined, result.batches_read_by_duckdb) == (
        ROWS,
        (),
        0,
    )
    assert result.compaction is not None and result.compaction.from_load == 1
    assert query(config, EVERYTHING) == query(whole, EVERYTHING)
    files = "select path, row_count, min_ts, max_ts from loaded_files"
    assert query(config, files) == query(whole, files)
    compacted = config.data_dir / BIG.replace("big.parquet", f"compacted-{DAY}.parquet")
    assert pq.read_metadata(compacted).num_row_groups == 2  # one per GPU, as always


def test_a_large_file_out_of_order_is_inserted_slice_by_slice_first_row_wins(
    config: Config, whole: Config, small_reads: int
) -> None:
    table = large_table(ROWS, DAY)
    repeated = table.slice(100, 50).set_column(
        7, "gpu_util_pct", pa.array([99.0] * 50, pa.float32())
    )
    shuffled = pa.concat_tables([table.slice(4000), table.slice(0, 4000), repeated])
    path = config.data_dir / BIG
    path.parent.mkdir(parents=True)
    pq.write_table(shuffled, path)
    result = ingest(config, today=TODAY)
    assert (result.samples_loaded, result.duplicates_skipped) == (ROWS, 50)
    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (1, 0)
    assert query(config, EVERYTHING) == query(whole, EVERYTHING)


def test_a_large_file_with_a_bad_row_in_its_last_slice_loads_nothing(
    config: Config, small_reads: int
) -> None:
    table = large_table(10_000, DAY)
    utils = table.column("gpu_util_pct").to_pylist()
    utils[9_990] = float("nan")
    table = table.set_column(7, "gpu_util_pct", pa.array(utils, pa.float32()))
    path = config.data_dir / BIG
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    write_samples(config.data_dir, f"raw/samples/date={DAY}/host=h1/a.parquet", [sample(0)])
    with pytest.warns(QuarantineWarning):
        result = ingest(config, today=TODAY)
    assert [(q.path, q.reason) for q in result.quarantined] == [
        (BIG, "column gpu_util_pct: value nan is out of range (0 to 100)")
    ]
    assert query(config, "select count(*), min(host) from samples") == [(1, "h1")]


def test_a_batch_of_many_files_is_read_in_pieces_of_whole_files(
    config: Config, tmp_path: Path, small_reads: int
) -> None:
    """Ten host-days of 1,000 rows each: pieces of three host-days, each compacted from its
    piece's rows; the same rows as one whole read."""
    tables = {}
    for number in range(10):
        relative = f"raw/samples/date={DAY}/host=h{number}/day.parquet"
        tables[relative] = large_table(1000, DAY, host=f"h{number}")
        path = config.data_dir / relative
        path.parent.mkdir(parents=True)
        pq.write_table(tables[relative], path)
    result = ingest(config, today=TODAY)
    assert (result.samples_loaded, result.batches, result.batches_read_by_duckdb) == (10_000, 1, 0)
    assert result.compaction is not None and result.compaction.from_load == 10
    twin = Config(data_dir=tmp_path / "whole")
    for relative, table in tables.items():
        (twin.data_dir / relative).parent.mkdir(parents=True)
        pq.write_table(table, twin.data_dir / relative)
    ingest(twin, today=TODAY)
    assert query(config, EVERYTHING) == query(twin, EVERYTHING)


def test_without_compaction_a_large_file_is_inserted_in_slices(
    config: Config, small_reads: int
) -> None:
    path = config.data_dir / BIG
    path.parent.mkdir(parents=True)
    pq.write_table(large_table(10_000, DAY), path)
    result = ingest(config, compact=False)
    assert (result.samples_loaded, result.duplicates_skipped) == (10_000, 0)
    assert query(config, "select count(*) from samples_stored") == [(10_000,)]


_MEASURE = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import datetime as dt
    from gpufleet.config import Config
    from gpufleet.warehouse.ingest import cut, ingest

    def peak_mb():
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(l for l in status if l.startswith("VmHWM:")).split()[1]) // 1024

    cut.MAX_ROWS_PER_READ = int(sys.argv[2])
    today = dt.date.fromisoformat(sys.argv[3])
    ingest(Config(data_dir=Path(sys.argv[4])), today=today)  # what any ingest allocates once
    before = peak_mb()
    result = ingest(Config(data_dir=Path(sys.argv[1])), today=today)
    print(json.dumps({"grown_mb": peak_mb() - before, "samples": result.samples_loaded}))
    """
)


def _ingest_peak_growth(data_dir: Path, limit: int, warm: Path) -> dict[str, int]:
    """Ingest in a process of its own, after an ingest of `warm` (a small data directory,
    for what any ingest allocates once); how far its peak RSS grew over the second ingest
    (VmHWM: a child's ru_maxrss starts from its parent's), and the samples it loaded."""
    completed = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(data_dir), str(limit), TODAY.isoformat(), str(warm)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return dict(json.loads(completed.stdout.splitlines()[-1]))


@pytest.mark.slow  # starts processes
def test_a_file_of_many_rows_is_ingested_in_bounded_memory(tmp_path: Path) -> None:
    """800,000 rows: read whole, the ingest's peak grows by about 0.6 KB a row; read in
    slices of 50,000, by a tenth of that."""
    rows = 800_000
    write_large_file(tmp_path / "sliced", rows, DAY)
    # A copy of hard links: compaction replaces the folder, never a file's contents.
    shutil.copytree(tmp_path / "sliced", tmp_path / "whole", copy_function=os.link)
    warm = tmp_path / "warm"
    write_large_file(warm, 60_000, DAY - dt.timedelta(days=1))
    whole = _ingest_peak_growth(tmp_path / "whole", 10 * rows, warm)
    shutil.rmtree(warm)
    write_large_file(warm, 60_000, DAY - dt.timedelta(days=1))
    sliced = _ingest_peak_growth(tmp_path / "sliced", 50_000, warm)
    assert whole["samples"] == sliced["samples"] == rows
    assert whole["grown_mb"] > 250, whole
    assert sliced["grown_mb"] < whole["grown_mb"] / 4, (sliced, whole)


def _xids_as_int64(table: pa.Table) -> pa.Table:
    """`table` as a writer of 64-bit XID lists writes it: a file polars does not read."""
    index = table.schema.get_field_index("xid_errors")
    return table.set_column(
        index, "xid_errors", table.column("xid_errors").cast(pa.list_(pa.int64()))
    )


def test_a_large_file_polars_does_not_read_is_read_by_duckdb_in_slices(
    config: Config, whole: Config, small_reads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = large_table(ROWS, DAY)
    path = config.data_dir / BIG
    path.parent.mkdir(parents=True)
    pq.write_table(_xids_as_int64(table), path)
    slices: list[int] = []

    def counted(rows: pa.RecordBatch, *, by_duckdb: bool) -> object:
        slices.append(len(rows) if by_duckdb else -1)
        return cast_slice(rows, by_duckdb=by_duckdb)

    monkeypatch.setattr(sliced, "cast_slice", counted)
    result = ingest(config, today=TODAY)
    assert (result.samples_loaded, result.quarantined) == (ROWS, ())
    assert max(slices) <= small_reads and -1 not in slices  # DuckDB cast each slice
    assert result.compaction is not None and result.compaction.from_load == 1
    assert query(config, EVERYTHING) == query(whole, EVERYTHING)  # as a collector's file


def test_a_large_file_polars_does_not_read_with_a_value_that_does_not_fit_loads_nothing(
    config: Config, small_reads: int
) -> None:
    table = _xids_as_int64(large_table(10_000, DAY))
    index = table.schema.get_field_index("gpu_index")
    indexes = table.column("gpu_index").cast(pa.int64()).to_pylist()
    indexes[9_990] = -1
    table = table.set_column(index, "gpu_index", pa.array(indexes, pa.int64()))
    path = config.data_dir / BIG
    path.parent.mkdir(parents=True)
    pq.write_table(table, path)
    with pytest.warns(QuarantineWarning):
        result = ingest(config, today=TODAY)
    assert [(q.path, q.reason) for q in result.quarantined] == [
        (BIG, "column gpu_index: value -1 does not fit USMALLINT")
    ]
    assert query(config, "select count(*) from samples") == [(0,)]
