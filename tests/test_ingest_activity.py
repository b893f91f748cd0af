"""The sample columns of contract v1.2 (activity, health, MIG devices) load whichever way a
batch is read (by polars or DuckDB, deduplicated, in slices, on a Dask worker) and into the lake's
compacted files; a file without them (an older collector's, another writer's) loads
beside them with NULL there (docs/reference.md#sample-files)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.collectors.schema import SAMPLE_SCHEMA, V1_1_SCHEMA, V1_2_FIELDS, file_metadata
from gpufleet.config import Config
from gpufleet.warehouse.ingest import cut, find_sample_files, ingest
from gpufleet.warehouse.ingest.fanned import LoadTask, run_load_task
from gpufleet.warehouse.ingest.values import time_limits
from gpufleet.warehouse.lake.compact_ahead import staging_directory
from tests.test_ingest import (
    DAY1,
    DAY2,
    query,
    read_by_duckdb,
    sample,
    write_samples,
    write_table,
)

NEW = [field.name for field in V1_2_FIELDS]
SELECTED = "select gpu_uuid, epoch(ts)::int % 100, " + ", ".join(NEW) + " from samples"
ORDERED = SELECTED + " order by gpu_uuid, ts"


def activity(seconds: int) -> dict[str, Any]:
    """A Hopper GPU's sample with every v1.2 column of a GPU's own row."""
    return {
        **sample(seconds),
        "sm_active_pct": 62.5,
        "sm_occupancy_pct": 30.25,
        "tensor_active_pct": 12.5,
        "dram_active_pct": 40.0,
        "pcie_rx_bytes_s": 1.5e9,
        "pcie_tx_bytes_s": 2.5e8,
        "nvlink_rx_bytes_s": 3.0e11,
        "nvlink_tx_bytes_s": 0.0,
        "xid_errors": [79] if seconds == 10 else [],
        "ecc_uncorrected_volatile": 1,
        "ecc_corrected_volatile": 12,
        "remapped_rows_pending": False,
        "remapped_rows_failure": seconds == 10,
        "retired_pages_pending": None,
        "pcie_replay_count": 3,
    }


def mig_device(seconds: int) -> dict[str, Any]:
    """A MIG device's row: its own UUID, its parent GPU, profile and slice."""
    return {
        **sample(seconds, gpu="MIG-a1"),
        "gpu_util_pct": None,
        "sm_active_pct": 50.0,
        "parent_gpu_uuid": "GPU-a",
        "mig_profile": "3g.40gb",
        "mig_slice_fraction": 3 / 7,
    }


def _stored(name: str, value: Any) -> Any:
    """A value as the warehouse gives it back (a float32 column's rounded to float32)."""
    if isinstance(value, float) and SAMPLE_SCHEMA.field(name).type == pa.float32():
        return pa.scalar(value, pa.float32()).as_py()
    return value


def expected() -> list[tuple[Any, ...]]:
    rows = sorted(
        [activity(0), activity(10), mig_device(0), mig_device(10), sample(20, gpu="GPU-old")],
        key=lambda row: (row["gpu_uuid"], row["ts"]),
    )
    return [
        (
            row["gpu_uuid"],
            int(row["ts"].timestamp()) % 100,
            *(_stored(name, row.get(name)) for name in NEW),
        )
        for row in rows
    ]


def _write_fleet(config: Config) -> None:
    """A v1.2 GPU with a MIG device, and an older collector's file (no v1.2 columns)."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [activity(0), activity(10)])
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [mig_device(0), mig_device(10)])
    old_row = {k: v for k, v in sample(20, gpu="GPU-old").items() if k in V1_1_SCHEMA.names}
    old = pa.Table.from_pylist([old_row], schema=V1_1_SCHEMA.with_metadata(file_metadata()))
    write_table(config.data_dir, f"{DAY2}/old.parquet", old)  # a batch of its own


@pytest.mark.parametrize("way", ["polars", "DuckDB", "deduplicated", "sliced", "foreign"])
def test_the_v1_2_columns_load_whichever_way_the_batch_is_read(
    config: Config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, way: str
) -> None:
    _write_fleet(config)
    if way == "DuckDB":  # as when polars does not read a file that DuckDB reads
        read_by_duckdb(monkeypatch)
    elif way == "deduplicated":  # a repeated key
        write_samples(config.data_dir, f"{DAY1}/c.parquet", [activity(0)])
    elif way == "sliced":  # the files are read in slices of one row
        monkeypatch.setattr(cut, "MAX_ROWS_PER_READ", 1)
    elif way == "foreign":  # another writer: XIDs as int64, rates as float32, no MIG columns
        plain = pa.Table.from_pylist([activity(0), activity(10)], schema=SAMPLE_SCHEMA)
        plain = plain.set_column(
            plain.schema.get_field_index("xid_errors"),
            "xid_errors",
            plain.column("xid_errors").cast(pa.list_(pa.int64())),
        )
        plain = plain.set_column(
            plain.schema.get_field_index("pcie_rx_bytes_s"),
            "pcie_rx_bytes_s",
            plain.column("pcie_rx_bytes_s").cast(pa.float32()),
        )
        plain = plain.drop_columns(["parent_gpu_uuid", "mig_profile", "mig_slice_fraction"])
        write_table(config.data_dir, f"{DAY1}/a.parquet", plain)
    with caplog.at_level(logging.DEBUG, logger="gpufleet.ingest"):
        result = ingest(config, compact=False)
    assert result.quarantined == ()
    assert query(config, ORDERED) == expected()
    first = next(r.message for r in caplog.records if r.levelno == logging.DEBUG)
    assert (
        first
        == {
            "polars": "ingest: 2 files loaded as read",
            "DuckDB": "ingest: 2 files loaded as read",
            "deduplicated": "ingest: 3 files deduplicated",
            # the first batch's files in slices (no message), then the old file's batch
            "sliced": "ingest: 1 files loaded as read",
            "foreign": "ingest: 2 files loaded as read",
        }[way]
    )


def test_a_dask_worker_writes_the_v1_2_columns_into_the_compacted_file(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [activity(0), activity(10)])
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [mig_device(0), mig_device(10)])
    files = tuple(find_sample_files(config))
    task = LoadTask(
        index=0,
        count=1,
        data_dir=str(config.data_dir.absolute()),
        batches=(files,),
        listed={DAY1: tuple(file.path for file in files)},
        today=dt.date(2026, 11, 17),
        limits=time_limits(config.ingest, dt.datetime.now(dt.UTC)),
        run="0123456789ab",
    )
    staging = staging_directory(config.data_dir / DAY1, task.run)
    staging.mkdir()  # as the ingest's host makes it
    (taken,) = run_load_task(task).batches
    assert taken is not None and taken.rows == 4
    (written,) = staging.glob("compacted-*.parquet")
    # A task of an ingest given up (its staging folders gone), ending late, finds its own
    # run's folder gone and writes nothing: it never replaces the live run's folder or file.
    given_up = dataclasses.replace(task, run="ba9876543210")
    with pytest.raises(FileNotFoundError, match="the ingest is over"):
        run_load_task(given_up)
    assert list(staging.parent.glob(".*")) == [staging]
    assert list(staging.iterdir()) == [written]
    table = pq.read_table(written)
    assert table.schema.names == SAMPLE_SCHEMA.names
    mig = table.filter(pa.compute.equal(table.column("gpu_uuid"), "MIG-a1"))
    assert mig.column("mig_profile").to_pylist() == ["3g.40gb", "3g.40gb"]


def test_compacted_days_in_the_lake_keep_the_v1_2_columns_and_old_files_read_null(
    config: Config,
) -> None:
    """A finished day is written ahead into the lake: its compacted file holds every
    column, and the samples view reads them back, NULL for the older collector's rows."""
    _write_fleet(config)
    result = ingest(config, today=dt.date(2026, 11, 18))
    assert result.quarantined == ()
    lake = query(config, "select path, sample_columns from build_state.lake_files")
    assert [held for _, held in lake] == [len(SAMPLE_SCHEMA)] * 2
    assert query(config, "select count(*) from samples_stored") == [(0,)]
    for compacted in Path(config.data_dir).rglob("compacted-*.parquet"):
        assert pq.read_schema(compacted).names == SAMPLE_SCHEMA.names
    assert query(config, ORDERED) == expected()
