"""Loading raw sample files: dedup, late data, tolerant schemas, quarantine, batching."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.config import Config
from gpufleet.warehouse.base import SAMPLE_COLUMNS
from gpufleet.warehouse.base.raw_tables import ensure_raw_tables
from gpufleet.warehouse.ingest import (
    IngestResult,
    QuarantineWarning,
    SampleFile,
    find_sample_files,
    ingest,
    plan_batches,
)
from gpufleet.warehouse.ingest import read as read_module
from gpufleet.warehouse.ingest.footers import Footer, schema_problem
from gpufleet.warehouse.ingest.insert import INSERT_NEW_SQL, Keys, create_existing_view
from tests.refused_reads import run_gpufleet

pytestmark = pytest.mark.fleet

T0 = dt.datetime(2026, 11, 16, 9, 0, tzinfo=dt.UTC)
DAY1 = "raw/samples/date=2026-11-16/host=h1"
DAY2 = "raw/samples/date=2026-11-17/host=h1"


def sample(
    seconds: int, *, gpu: str = "GPU-a", util: float | None = 50.0, day: dt.datetime = T0
) -> dict[str, Any]:
    """One complete sample row, `seconds` after `day`."""
    return {
        "ts": day + dt.timedelta(seconds=seconds),
        "interval_s": 10.0,
        "host": "h1",
        "gpu_index": 0,
        "gpu_uuid": gpu,
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "status": "ok",
        "gpu_util_pct": util,
        "mem_util_pct": 10.0,
        "mem_used_bytes": 1 << 30,
        "mem_total_bytes": 80 << 30,
        "power_w": 300.0,
        "power_limit_w": 700.0,
        "energy_mj": 1000 + seconds,
        "temp_gpu_c": 60,
        "temp_mem_c": 70,
        "sm_clock_mhz": 1980,
        "sm_clock_max_mhz": 1980,
        "mem_clock_mhz": 2619,
        "clock_event_mask": 0,
        "thermal_violation_ns": 0,
        "power_violation_ns": 0,
        "mig_enabled": False,
        "processes": [{"pid": 42, "user": "alice", "used_mem_bytes": 1 << 30, "job_id": "7"}],
    }


def write_samples(data_dir: Path, relative: str, rows: Sequence[dict[str, Any]]) -> Path:
    """A sample file as a collector writes it (contract schema and metadata)."""
    table = pa.Table.from_pylist(list(rows), schema=SAMPLE_SCHEMA.with_metadata(file_metadata()))
    return write_table(data_dir, relative, table)


def write_table(data_dir: Path, relative: str, table: pa.Table) -> Path:
    path = data_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@functools.cache
def _reader() -> duckdb.DuckDBPyConnection:
    """One DuckDB for the reads below: each attaches the warehouse read-only, some 2 ms of
    CPU, where a DuckDB of its own took 15 (an instance loads its built-in extensions)."""
    return duckdb.connect()


@contextlib.contextmanager
def reading(warehouse: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection on the published `warehouse`, opened read-only until the block ends
    (one at a time)."""
    reader = _reader()
    reader.execute("attach ? as published (read_only)", [str(warehouse)])
    try:
        with reader.cursor() as con:
            con.execute("use published")
            yield con
    finally:
        reader.execute("detach published")


def query(config: Config, sql: str) -> list[tuple[Any, ...]]:
    """`sql`'s rows on the published warehouse, opened read-only for this query alone."""
    with reading(config.warehouse_path) as con:
        return con.execute(sql).fetchall()


def count(config: Config, table: str = "samples") -> int:
    return int(query(config, f"select count(*) from {table}")[0][0])


def run_ingest(config: Config) -> IngestResult:
    """`ingest` with quarantine warnings allowed (tests that expect one use pytest.warns).

    Compaction is off: these tests look at the raw files as written; tests/test_compact.py
    covers what compaction does to them.
    """
    return ingest(config, compact=False)


def read_by_duckdb(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read every file as one polars does not read is: by DuckDB (`ingest/read.py`)."""
    plain = read_module.read_footer

    def footer(path: str, relative: str) -> Footer:
        found = plain(path, relative)
        if found.plan.problem is not None:
            return found
        return dataclasses.replace(found, plan=dataclasses.replace(found.plan, columns=None))

    monkeypatch.setattr(read_module, "read_footer", footer)


# --- loading and deduplication ---------------------------------------------------------


def test_says_where_its_time_went_step_by_step(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    started = time.perf_counter()
    result = ingest(config)
    wall = time.perf_counter() - started
    assert [name for name, _ in result.step_seconds] == [
        "reference files and listing",
        "opening the warehouse",
        "new files",
        "waiting for reads",
        "batches",
        "reference tables",
        "compaction",
        "publish",
        "quarantine",
    ]
    assert all(seconds >= 0 for _, seconds in result.step_seconds)
    assert sum(seconds for _, seconds in result.step_seconds) <= wall
    line = str(result).splitlines()[1]
    assert line.startswith("  ") and "s: reference files and listing " in line
    assert ", batches " in line and ", publish " in line
    # The writer thread's work overlaps the batches: its own line, not part of the steps' sum.
    assert [name for name, _ in result.alongside_seconds] == ["compacted files written"]
    (written_seconds,) = (seconds for _, seconds in result.alongside_seconds)
    assert 0 < written_seconds <= wall
    alongside = str(result).splitlines()[2]
    assert alongside.startswith("  alongside the batches, in a thread: compacted files written ")
    # polars reads a collector's files: DuckDB reads none.
    assert result.batches_read_by_duckdb == 0 and "DuckDB" not in line


def test_loads_every_column_and_records_the_file(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    result = run_ingest(config)

    assert (result.files_loaded, result.samples_loaded, result.duplicates_skipped) == (1, 2, 0)
    assert str(result).startswith("ingest: 1 files, 2 new samples, 0 duplicates skipped, 0 q")
    row = query(config, "select * from samples order by ts limit 1")[0]
    names = [name for name, _ in SAMPLE_COLUMNS]
    loaded = dict(zip(names, row, strict=True))
    expected = sample(0)
    for name in names:
        assert loaded[name] == expected.get(name), name  # (no alloc_job_id: NULL)
    assert query(
        config, "select path, row_count, min_ts, max_ts, size_bytes > 0 from loaded_files"
    ) == [(f"{DAY1}/a.parquet", 2, T0, T0 + dt.timedelta(seconds=10), True)]


def test_a_second_ingest_loads_nothing_again(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    run_ingest(config)
    again = run_ingest(config)
    assert (again.files_loaded, again.samples_loaded, again.duplicates_skipped) == (0, 0, 0)
    assert count(config) == 2
    assert count(config, "loaded_files") == 1


def test_duplicates_across_files_and_within_a_file_count_once_first_loaded_wins(
    config: Config,
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0, util=1.0), sample(10)])
    write_samples(
        config.data_dir,
        f"{DAY1}/b.parquet",
        [sample(0, util=2.0), sample(20, util=3.0), sample(20, util=4.0)],
    )
    result = run_ingest(config)
    assert (result.samples_loaded, result.duplicates_skipped) == (3, 2)
    assert query(config, "select epoch(ts)::int % 100, gpu_util_pct from samples order by ts") == [
        (0, 1.0),  # a.parquet sorts first and wins
        (10, 50.0),
        (20, 3.0),  # the first row of the file wins
    ]
    # Different GPUs at the same instant are different samples.
    write_samples(config.data_dir, f"{DAY1}/c.parquet", [sample(0, gpu="GPU-b")])
    assert run_ingest(config).samples_loaded == 1


@pytest.mark.parametrize("second_ts", [(10, 20), (20, 30)], ids=["repeated", "new"])
def test_a_gpu_in_two_hosts_folders_of_a_day_counts_each_key_once(
    config: Config, second_ts: tuple[int, int]
) -> None:
    # A compacting ingest reads each folder's host-day as a part of its own, sorted by GPU
    # and time within it, so a GPU's rows in two folders are not neighbours.
    h2 = DAY1.replace("host=h1", "host=h2")
    write_samples(
        config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10), sample(0, gpu="GPU-b")]
    )
    write_samples(config.data_dir, f"{h2}/a.parquet", [sample(s, util=99.0) for s in second_ts])
    result = ingest(config)
    repeated = 10 in second_ts
    assert (result.samples_loaded, result.duplicates_skipped) == (5 - repeated, int(repeated))
    loaded = query(
        config,
        "select epoch(ts)::int % 100, gpu_util_pct from samples "
        "where gpu_uuid = 'GPU-a' order by ts",
    )
    assert loaded == [(0, 50.0), (10, 50.0), *((s, 99.0) for s in second_ts if s != 10)]


def test_rows_already_in_the_warehouse_are_skipped_on_a_later_ingest(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    run_ingest(config)
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(10, util=99.0), sample(20)])
    result = run_ingest(config)
    assert (result.samples_loaded, result.duplicates_skipped) == (1, 1)
    assert query(config, "select gpu_util_pct from samples order by ts") == [
        (50.0,),
        (50.0,),
        (50.0,),
    ]


def test_a_late_file_for_an_earlier_day_is_loaded(config: Config) -> None:
    day2 = T0 + dt.timedelta(days=1)
    write_samples(config.data_dir, f"{DAY2}/b.parquet", [sample(0, day=day2)])
    run_ingest(config)
    write_samples(config.data_dir, f"{DAY1}/late.parquet", [sample(0), sample(10)])
    result = run_ingest(config)
    assert (result.files_loaded, result.samples_loaded) == (1, 2)
    assert count(config) == 3


def test_rows_are_inserted_in_series_order(config: Config) -> None:
    """Sorted by (gpu_uuid, ts): each series' values sit together and compress well."""
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(30), sample(0, gpu="GPU-b")])
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(20), sample(0)])
    run_ingest(config)
    rows = query(config, "select gpu_uuid, ts from samples_stored order by rowid")
    assert rows == sorted(rows)


def test_files_read_by_polars_or_by_duckdb_give_the_same_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """polars reads collector files, and files that stored no Arrow schema or hold a
    float64 utilization (cast on the read). DuckDB reads a file polars does not read, and
    one whose process list has other field types (cast). Same rows, same file records."""
    paths = ("collector", "no schema stored", "float64", "by DuckDB", "process fields")
    configs = {path: Config(data_dir=tmp_path / path.replace(" ", "-")) for path in paths}
    first = [sample(0), sample(10, util=3.5), sample(0, gpu="GPU-b", util=None)]
    second = [sample(20), sample(10, gpu="GPU-b")]
    for target in configs.values():
        write_samples(target.data_dir, f"{DAY1}/a.parquet", first)
    for path in ("collector", "by DuckDB"):
        write_samples(configs[path].data_dir, f"{DAY1}/b.parquet", second)
    plain = pa.Table.from_pylist(second, schema=SAMPLE_SCHEMA)
    unstored = configs["no schema stored"].data_dir / DAY1 / "b.parquet"
    pq.write_table(plain, unstored, store_schema=False)
    index = plain.schema.get_field_index("gpu_util_pct")
    wide = plain.set_column(index, "gpu_util_pct", plain.column("gpu_util_pct").cast(pa.float64()))
    write_table(configs["float64"].data_dir, f"{DAY1}/b.parquet", wide)
    process = pa.struct([("pid", pa.int64()), ("user", pa.string()), ("job_id", pa.string())])
    index = plain.schema.get_field_index("processes")
    other = pa.array([[{"pid": 42, "user": "alice", "job_id": "7"}]] * 2, pa.list_(process))
    write_table(
        configs["process fields"].data_dir,
        f"{DAY1}/b.parquet",
        plain.set_column(index, "processes", other),
    )

    messages, by_duckdb = {}, {}
    for path, target in configs.items():
        caplog.clear()
        with monkeypatch.context() as patched:
            if path == "by DuckDB":  # as when polars does not read a file that DuckDB reads
                read_by_duckdb(patched)
            with caplog.at_level(logging.DEBUG, logger="gpufleet.ingest"):
                result = run_ingest(target)
        assert (result.samples_loaded, result.duplicates_skipped) == (5, 0)
        messages[path] = [r.message for r in caplog.records if r.levelno == logging.DEBUG]
        by_duckdb[path] = result.batches_read_by_duckdb
    assert messages == {path: ["ingest: 2 files loaded as read"] for path in paths}
    assert by_duckdb == {
        "collector": 0,
        "no schema stored": 0,
        "float64": 0,
        "by DuckDB": 1,
        "process fields": 1,
    }
    everything = "select * exclude (processes) from samples order by gpu_uuid, ts"
    files = "select path, row_count, min_ts, max_ts from loaded_files order by path"
    for path in paths[1:]:
        assert query(configs["collector"], everything) == query(configs[path], everything)
        assert query(configs["collector"], files) == query(configs[path], files)
    assert len(query(configs["collector"], everything)) == 5


def test_empty_file_is_recorded_with_no_rows(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/empty.parquet", [])
    result = run_ingest(config)
    assert result.files_loaded == 1
    assert query(config, "select row_count, min_ts from loaded_files") == [(0, None)]


# --- tolerant schemas ------------------------------------------------------------------


def test_a_file_without_nullable_columns_loads_them_as_null(config: Config) -> None:
    old = pa.Table.from_pylist(
        [sample(0)], schema=SAMPLE_SCHEMA.with_metadata(file_metadata())
    ).drop_columns(["energy_mj", "processes", "temp_mem_c", "gpu_name"])
    write_table(config.data_dir, f"{DAY1}/old.parquet", old)
    write_samples(config.data_dir, f"{DAY1}/new.parquet", [sample(10)])
    result = run_ingest(config)
    assert (result.samples_loaded, result.quarantined) == (2, ())
    assert query(
        config, "select energy_mj, processes, temp_mem_c, gpu_name from samples order by ts"
    ) == [
        (None, None, None, None),
        (
            1010,
            [{"pid": 42, "user": "alice", "used_mem_bytes": 1 << 30, "job_id": "7"}],
            70,
            "NVIDIA H100 80GB HBM3",
        ),
    ]


def test_extra_columns_are_dropped(config: Config) -> None:
    table = pa.Table.from_pylist([sample(0)], schema=SAMPLE_SCHEMA)
    table = table.append_column("fan_speed_pct", pa.array([40.0], pa.float32()))
    table = table.append_column("filename", pa.array(["shadowing a DuckDB option"]))
    write_table(config.data_dir, f"{DAY1}/newer.parquet", table)
    result = run_ingest(config)
    assert result.samples_loaded == 1
    columns = [
        row[0]
        for row in query(
            config, "select column_name from duckdb_columns() where table_name = 'samples'"
        )
    ]
    assert columns == [name for name, _ in SAMPLE_COLUMNS]


def test_integer_widths_that_fit_are_accepted(config: Config) -> None:
    row = sample(0)
    table = pa.table(
        {
            "ts": pa.array([row["ts"]], pa.timestamp("ns", tz="UTC")),
            "interval_s": pa.array([10.0], pa.float64()),
            "host": ["h1"],
            "gpu_index": pa.array([3], pa.int32()),
            "gpu_uuid": ["GPU-a"],
            "status": pa.array(["ok"]).dictionary_encode(),
            "gpu_util_pct": pa.array([75], pa.int64()),
            "temp_gpu_c": pa.array([61], pa.int8()),
        }
    )
    write_table(config.data_dir, f"{DAY1}/wide.parquet", table)
    result = run_ingest(config)
    assert result.quarantined == ()
    assert query(
        config, "select ts, interval_s, gpu_index, status, gpu_util_pct, temp_gpu_c from samples"
    ) == [(row["ts"], 10.0, 3, "ok", 75.0, 61)]


def test_schema_problem_rules() -> None:
    good = {
        "ts": "TIMESTAMP WITH TIME ZONE",
        "interval_s": "FLOAT",
        "host": "VARCHAR",
        "gpu_index": "USMALLINT",
        "gpu_uuid": "VARCHAR",
        "status": "VARCHAR",
    }
    assert schema_problem(good) is None
    assert schema_problem({**good, "ts": "TIMESTAMP"}) == (
        "column 'ts' is TIMESTAMP, expected TIMESTAMPTZ"
    )
    assert schema_problem({**good, "gpu_util_pct": "VARCHAR"}) is not None
    assert schema_problem({**good, "energy_mj": "DOUBLE"}) is not None  # no float -> integer
    assert schema_problem({**good, "mig_enabled": "INTEGER"}) is not None
    assert schema_problem({**good, "processes": "VARCHAR[]"}) is not None
    assert schema_problem({**good, "processes": 'STRUCT(pid BIGINT, "user" VARCHAR)[]'}) is None
    assert schema_problem({**good, "file_row_number": "BIGINT"}) == (
        "column 'file_row_number' is reserved for read_parquet's own use"
    )
    without_uuid = {k: v for k, v in good.items() if k != "gpu_uuid"}
    assert schema_problem(without_uuid) == "missing required column 'gpu_uuid'"


# --- quarantine ------------------------------------------------------------------------


def _expect_quarantine(config: Config, relative: str, reason: str) -> IngestResult:
    """Ingest, expecting exactly `relative` quarantined with a reason matching `reason`."""
    with pytest.warns(QuarantineWarning) as caught:
        result = ingest(config, compact=False)
    assert [q.path for q in result.quarantined] == [relative]
    assert re.search(reason, result.quarantined[0].reason), result.quarantined[0].reason
    messages = [str(w.message) for w in caught]
    assert any(m.startswith(f"quarantined {relative}: ") for m in messages), messages
    assert not (config.data_dir / relative).exists()
    assert (config.data_dir / "quarantine" / relative).is_file()
    rows = query(config, "select path, reason, moved_to, quarantined_at from quarantined_files")
    assert [(p, r, m) for p, r, m, _ in rows] == [
        (relative, result.quarantined[0].reason, f"quarantine/{relative}")
    ]
    assert rows[0][3] is not None
    return result


def test_a_corrupt_file_is_quarantined_and_the_others_load(
    config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    (config.data_dir / DAY1 / "b.parquet").write_bytes(b"not parquet at all, just garbage bytes")
    write_samples(config.data_dir, f"{DAY2}/c.parquet", [sample(0, day=T0 + dt.timedelta(1))])
    with caplog.at_level(logging.WARNING, logger="gpufleet.ingest"):
        result = _expect_quarantine(config, f"{DAY1}/b.parquet", "cannot read Parquet")
    assert (result.files_loaded, result.samples_loaded) == (2, 2)
    assert f"quarantined {DAY1}/b.parquet: cannot read Parquet" in caplog.text
    assert str(config.data_dir) not in result.quarantined[0].reason  # relative paths only
    assert str(result).endswith(f"\n  quarantined {DAY1}/b.parquet: {result.quarantined[0].reason}")


def test_a_file_with_a_corrupt_body_is_quarantined(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    path = write_samples(
        config.data_dir, f"{DAY1}/b.parquet", [sample(s) for s in range(10, 500, 10)]
    )
    data = bytearray(path.read_bytes())
    data[4:400] = b"\xff" * 396  # clobber the first data pages, keep the footer
    path.write_bytes(bytes(data))
    result = _expect_quarantine(config, f"{DAY1}/b.parquet", "cannot read Parquet")
    assert result.samples_loaded == 1


def test_a_file_whose_power_column_does_not_read_is_quarantined(config: Config) -> None:
    """The keys (ts, gpu_uuid, required columns) read, a later column does not: the batch
    falls back from loading straight from the files to staging, which finds the file."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    path = write_samples(
        config.data_dir, f"{DAY1}/b.parquet", [sample(s) for s in range(10, 500, 10)]
    )
    chunk = pq.read_metadata(path).row_group(0).column(SAMPLE_SCHEMA.get_field_index("power_w"))
    offsets = [chunk.data_page_offset]
    if chunk.has_dictionary_page:
        offsets.append(chunk.dictionary_page_offset)
    start = min(offsets)
    data = bytearray(path.read_bytes())
    data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
    result = _expect_quarantine(config, f"{DAY1}/b.parquet", "cannot read Parquet")
    assert result.samples_loaded == 1
    assert query(config, "select ts from samples") == [(T0,)]


def test_file_names_with_glob_characters_are_read_as_names(config: Config) -> None:
    """read_parquet takes paths as globs: `a[1].parquet` would read `a1.parquet`."""
    odd = DAY1
    write_samples(config.data_dir, f"{odd}/a1.parquet", [sample(0)])
    write_samples(config.data_dir, f"{odd}/a[1].parquet", [sample(10)])
    write_samples(config.data_dir, f"{odd}/a*.parquet", [sample(20)])
    result = run_ingest(config)
    assert (result.samples_loaded, result.duplicates_skipped, result.quarantined) == (3, 0, ())
    assert query(config, "select path, min_ts from loaded_files order by path") == [
        (f"{odd}/a*.parquet", T0 + dt.timedelta(seconds=20)),
        (f"{odd}/a1.parquet", T0),
        (f"{odd}/a[1].parquet", T0 + dt.timedelta(seconds=10)),
    ]


def test_column_names_with_control_characters_are_read_as_names(config: Config) -> None:
    """Column names come from the files: one that holds control characters (separators)
    neither crashes the ingest nor hides the real `ts` (text, so quarantined)."""
    good = pa.Table.from_pylist([sample(0)], schema=SAMPLE_SCHEMA)
    good = good.append_column("we\x1fird\x1e", pa.array([1]))
    write_table(config.data_dir, f"{DAY1}/a.parquet", good)
    spoof = pa.Table.from_pylist([sample(10)], schema=SAMPLE_SCHEMA).drop_columns(["ts"])
    spoof = spoof.add_column(
        0, "x\x1f0\x1fBIGINT\x1ets", pa.array([T0], pa.timestamp("us", tz="UTC"))
    )
    spoof = spoof.append_column("ts", pa.array(["2026-11-16 09:00:10+00"]))
    write_table(config.data_dir, f"{DAY1}/b.parquet", spoof)
    result = _expect_quarantine(config, f"{DAY1}/b.parquet", "column 'ts' is VARCHAR")
    assert result.samples_loaded == 1


def test_ts_as_string_is_quarantined(config: Config) -> None:
    table = pa.Table.from_pylist([sample(0)], schema=SAMPLE_SCHEMA)
    table = table.set_column(0, "ts", pa.array(["2026-11-16T09:00:00Z"]))
    write_table(config.data_dir, f"{DAY1}/bad.parquet", table)
    write_samples(config.data_dir, f"{DAY1}/good.parquet", [sample(10)])
    result = _expect_quarantine(config, f"{DAY1}/bad.parquet", r"column 'ts' is VARCHAR")
    assert result.samples_loaded == 1


def test_util_as_string_is_quarantined(config: Config) -> None:
    table = pa.Table.from_pylist([sample(0)], schema=SAMPLE_SCHEMA)
    index = table.schema.get_field_index("gpu_util_pct")
    table = table.set_column(index, "gpu_util_pct", pa.array(["50.0"]))
    write_table(config.data_dir, f"{DAY1}/bad.parquet", table)
    _expect_quarantine(config, f"{DAY1}/bad.parquet", r"column 'gpu_util_pct' is VARCHAR")
    assert count(config) == 0


def test_naive_timestamps_are_quarantined(config: Config) -> None:
    table = pa.Table.from_pylist([sample(0)], schema=SAMPLE_SCHEMA)
    table = table.set_column(0, "ts", pa.array([dt.datetime(2026, 11, 16, 9)], pa.timestamp("us")))
    write_table(config.data_dir, f"{DAY1}/naive.parquet", table)
    # polars alone would read it as UTC: its stored Arrow schema is what sets it aside.
    write_samples(config.data_dir, f"{DAY1}/good.parquet", [sample(20)])
    result = _expect_quarantine(config, f"{DAY1}/naive.parquet", r"column 'ts' is TIMESTAMP,")
    assert result.samples_loaded == 1


def test_a_missing_required_column_is_quarantined(config: Config) -> None:
    table = pa.Table.from_pylist([sample(0)], schema=SAMPLE_SCHEMA).drop_columns(["gpu_uuid"])
    write_table(config.data_dir, f"{DAY1}/bad.parquet", table)
    _expect_quarantine(config, f"{DAY1}/bad.parquet", r"missing required column 'gpu_uuid'")


def test_a_null_in_a_required_column_is_quarantined(config: Config) -> None:
    schema = pa.schema([f.with_nullable(True) for f in SAMPLE_SCHEMA])
    table = pa.Table.from_pylist([sample(0), {**sample(10), "host": None}], schema=schema)
    write_table(config.data_dir, f"{DAY1}/bad.parquet", table)
    write_samples(config.data_dir, f"{DAY1}/good.parquet", [sample(20)])
    result = _expect_quarantine(config, f"{DAY1}/bad.parquet", r"null in required column host")
    assert result.samples_loaded == 1  # no row of the bad file, not even its good one
    assert count(config) == 1


def test_a_value_that_does_not_fit_is_quarantined(config: Config) -> None:
    table = pa.table(
        {
            "ts": pa.array([T0], pa.timestamp("us", tz="UTC")),
            "interval_s": pa.array([10.0], pa.float32()),
            "host": ["h1"],
            "gpu_index": pa.array([-1], pa.int32()),
            "gpu_uuid": ["GPU-a"],
            "status": ["ok"],
        }
    )
    write_table(config.data_dir, f"{DAY1}/bad.parquet", table)
    _expect_quarantine(config, f"{DAY1}/bad.parquet", r"column gpu_index: value -1 does not fit")


def test_a_file_changed_after_load_is_quarantined_and_its_samples_stay(config: Config) -> None:
    path = write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    run_ingest(config)
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10), sample(20)])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    _expect_quarantine(config, f"{DAY1}/a.parquet", r"^changed after load \(was [\d,]+ bytes")
    assert count(config) == 1


def test_a_name_taken_in_quarantine_gets_a_time_stamp(config: Config) -> None:
    relative = f"{DAY1}/bad.parquet"
    (config.data_dir / "quarantine" / DAY1).mkdir(parents=True)
    (config.data_dir / "quarantine" / relative).write_bytes(b"an earlier bad file")
    write_samples(config.data_dir, f"{DAY1}/ok.parquet", [sample(0)])
    (config.data_dir / relative).write_bytes(b"garbage")
    with pytest.warns(QuarantineWarning):
        result = ingest(config, compact=False)
    moved_to = result.quarantined[0].moved_to
    assert re.fullmatch(rf"quarantine/{DAY1}/bad\.\d{{8}}T\d{{12}}Z\.parquet", moved_to)
    assert (config.data_dir / moved_to).read_bytes() == b"garbage"
    assert (config.data_dir / "quarantine" / relative).read_bytes() == b"an earlier bad file"


def test_hidden_and_underscore_names_are_ignored(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    for hidden in (
        f"{DAY1}/.a.parquet.tmp.parquet",
        f"{DAY1}/_spool.parquet",
        f"{DAY1}/.staging/x.parquet",
        "raw/samples/_tmp/date=2026-11-16/x.parquet",
        "raw/samples/.date=2026-11-16.compacting/x.parquet",
    ):
        (config.data_dir / hidden).parent.mkdir(parents=True, exist_ok=True)
        (config.data_dir / hidden).write_bytes(b"garbage that would be quarantined")
    (config.data_dir / DAY1 / "notes.txt").write_text("not a parquet file")
    assert [f.path for f in find_sample_files(config)] == [f"{DAY1}/a.parquet"]
    result = run_ingest(config)
    assert (result.files_loaded, result.quarantined) == (1, ())


def test_the_listing_lists_linked_files_but_does_not_enter_linked_folders(
    config: Config, tmp_path: Path
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    elsewhere = tmp_path / "elsewhere"
    write_samples(elsewhere, "b.parquet", [sample(1)])
    (config.data_dir / DAY1 / "b.parquet").symlink_to(elsewhere / "b.parquet")
    (config.data_dir / "raw" / "samples" / "date=2026-11-17").symlink_to(elsewhere)
    listing = find_sample_files(config)
    assert [f.path for f in listing] == [f"{DAY1}/a.parquet", f"{DAY1}/b.parquet"]
    target = (elsewhere / "b.parquet").stat()
    assert (listing[1].size_bytes, listing[1].mtime_ns) == (target.st_size, target.st_mtime_ns)


def test_a_folder_that_cannot_be_read_is_named_and_the_other_files_load(
    config: Config, tmp_path: Path
) -> None:
    """Not skipped in silence (#56): the ingest loads what it can read, names the folder and
    why in a warning, and fails once the rest is published; the folder loads once readable.
    The command runs where the folder's mode bars it, root or not (`refused_reads.py`)."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    write_samples(config.data_dir, f"{DAY2}/b.parquet", [sample(0, day=T0 + dt.timedelta(1))])
    refused = config.data_dir / DAY2
    refused.chmod(0)
    try:
        completed = run_gpufleet(tmp_path, "--data-dir", str(config.data_dir), "ingest")
    finally:
        refused.chmod(0o755)

    assert completed.returncode == 1, completed.stderr
    assert completed.stdout.startswith("ingest: 1 files, 1 new samples"), completed.stdout
    assert (
        f"  warning: {DAY2}: cannot be read (permission denied): the sample files below it "
        "are not loaded"
    ) in completed.stdout.splitlines()
    errors = [line for line in completed.stderr.splitlines() if "error" in line]
    assert errors == [
        f"gpufleet: error: {config.samples_dir}: 1 folder or file below it cannot be read, so "
        f"the sample files there are not loaded: {DAY2} (permission denied)"
    ]
    assert count(config) == 1
    again = ingest(config)
    assert (again.files_loaded, again.failures, again.warnings) == (1, (), ())
    assert count(config) == 2


def test_a_raw_samples_folder_that_cannot_be_read_says_so_not_unmounted(
    config: Config, tmp_path: Path
) -> None:
    """`chmod 000 raw/samples` reads "permission denied", not "no sample file ... (a share
    not mounted?)" (#56)."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    assert ingest(config).failures == ()
    config.samples_dir.chmod(0)
    try:
        completed = run_gpufleet(tmp_path, "--data-dir", str(config.data_dir), "ingest")
    finally:
        config.samples_dir.chmod(0o755)

    assert completed.returncode == 1, completed.stderr
    errors = [line for line in completed.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith(
        f"gpufleet: error: {config.samples_dir}: the raw samples location cannot be read "
        "(permission denied): its sample files are not loaded; newest sample file: "
    ), errors
    assert "mounted" not in completed.stdout + completed.stderr
    assert (
        "  warning: raw/samples: cannot be read (permission denied): the sample files below "
        "it are not loaded"
    ) in completed.stdout.splitlines()


# --- batching and cost -----------------------------------------------------------------


def test_batches_follow_date_partitions_and_the_size_limit() -> None:
    files = [SampleFile(f"{DAY2}/{i}.parquet", 1, 1) for i in range(3)] + [
        SampleFile(f"{DAY1}/{i}.parquet", 1, 1) for i in range(5)
    ]
    batches = plan_batches(files, max_files=2)
    assert [[f.path.split("/")[2] + "/" + f.path[-9:] for f in b] for b in batches] == [
        ["date=2026-11-16/0.parquet", "date=2026-11-16/1.parquet"],
        ["date=2026-11-16/2.parquet", "date=2026-11-16/3.parquet"],
        ["date=2026-11-16/4.parquet"],
        ["date=2026-11-17/0.parquet", "date=2026-11-17/1.parquet"],
        ["date=2026-11-17/2.parquet"],
    ]


def test_progress_is_reported_per_batch(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    write_samples(config.data_dir, f"{DAY2}/a.parquet", [sample(0, day=T0 + dt.timedelta(1))])
    messages: list[str] = []
    result = ingest(config, progress=messages.append, compact=False)
    assert result.batches == 2
    assert messages == [
        "ingest: 2 new files in 2 batches",
        "ingest: batch 1/2 (1 files, date=2026-11-16)",
        "ingest: batch 2/2 (1 files, date=2026-11-17)",
    ]


def test_dedup_reads_only_the_new_rows_time_range(config: Config) -> None:
    """The anti-join against `samples` is pruned by zone maps to the batch's time range.
    (On a connection of the raw tables alone: publishing its 2 million rows would cost
    more than the rest of the test.)"""
    with duckdb.connect() as con:
        ensure_raw_tables(con)
        names = ", ".join(f'"{name}"' for name, _ in SAMPLE_COLUMNS)
        fill = ", ".join(
            {
                "ts": "$t0 + to_seconds(i * 10)",
                "interval_s": "10",
                "host": "'h1'",
                "gpu_index": "0",
                "gpu_uuid": "'GPU-' || (i % 8)",
                "status": "'ok'",
            }.get(name, "null")
            for name, _ in SAMPLE_COLUMNS
        )
        con.execute(
            f"insert into samples_stored ({names}, load_id) "
            f"select {fill}, 1 from range(2000000) t(i)",
            {"t0": T0},
        )
        con.execute(
            "create temp table _ingest_rows as select * from samples where ts = $t",
            {"t": T0 + dt.timedelta(days=1)},
        )
        day = T0 + dt.timedelta(days=1)
        create_existing_view(con, config, Keys([], day, day), None)
        plan = con.execute(
            f"explain analyze {INSERT_NEW_SQL}",
            {
                "min_ts": T0 + dt.timedelta(days=1),
                "max_ts": T0 + dt.timedelta(days=1),
                "load_id": 2,
            },
        ).fetchall()[0][1]
    scans = re.findall(r"Row Groups Scanned: (\d+) / (\d+)", plan)
    samples_scan = max(scans, key=lambda pair: int(pair[1]))
    assert int(samples_scan[1]) > 10
    assert int(samples_scan[0]) <= 2, plan


def test_values_come_from_the_file_not_from_hive_style_directory_names(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [{**sample(0), "host": "h1.renamed"}])
    run_ingest(config)
    assert query(config, "select host from samples") == [("h1.renamed",)]
