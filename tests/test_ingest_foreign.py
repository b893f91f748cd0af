"""Files that gpufleet's collector did not write (pandas, Spark, polars or plain pyarrow
jobs): every file whose columns read as the contract's types without loss is read in the
same one pass as a collector's, with no schema probe; a file that breaks the contract is
set aside from its footer or from the values of that one read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.collectors.schema import SAMPLE_SCHEMA
from gpufleet.config import Config
from gpufleet.warehouse.ingest import QuarantineWarning, ingest
from tests.templates import made_once
from tests.test_ingest import DAY1, T0, query, sample, write_samples

pytestmark = pytest.mark.fleet

NULLABLE = pa.schema([field.with_nullable(True) for field in SAMPLE_SCHEMA])
DAY = DAY1.replace("date=2026-11-16", "date=2026-11-15")  # a completed day, for compaction
TODAY = dt.date(2026, 11, 17)


def rows(first: int, count: int = 3, gpu: str = "GPU-a") -> list[dict[str, Any]]:
    return [sample(first + 10 * n, gpu=gpu, day=T0 - dt.timedelta(days=1)) for n in range(count)]


def _plain(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """A table as a job builds it: pyarrow's default fields, all nullable, no metadata."""
    return pa.Table.from_pylist(list(rows), schema=NULLABLE)


def _retyped(table: pa.Table, **types: pa.DataType) -> pa.Table:
    for name, kind in types.items():
        index = table.schema.get_field_index(name)
        table = table.set_column(index, pa.field(name, kind), table.column(name).cast(kind))
    return table


# Each writer: (name, how it writes a list of rows to a path).
Writer = Callable[[Sequence[dict[str, Any]], Path], None]


def nullable_fields(rows: Sequence[dict[str, Any]], path: Path) -> None:
    pq.write_table(_plain(rows), path)


def without_violation_and_mig_columns(rows: Sequence[dict[str, Any]], path: Path) -> None:
    table = _plain(rows).drop_columns(["thermal_violation_ns", "power_violation_ns", "mig_enabled"])
    pq.write_table(table, path)


def float64_utilizations_int64_indices(rows: Sequence[dict[str, Any]], path: Path) -> None:
    table = _retyped(
        _plain(rows),
        gpu_util_pct=pa.float64(),
        mem_util_pct=pa.float64(),
        interval_s=pa.float64(),
        gpu_index=pa.int64(),
        temp_gpu_c=pa.int64(),
        sm_clock_mhz=pa.int64(),
    )
    pq.write_table(table, path)


def no_stored_schema_nanoseconds(rows: Sequence[dict[str, Any]], path: Path) -> None:
    table = _retyped(_plain(rows), ts=pa.timestamp("ns", tz="UTC"))
    pq.write_table(table, path, store_schema=False)


def dictionary_strings_other_zone_extra_column(rows: Sequence[dict[str, Any]], path: Path) -> None:
    table = _retyped(
        _plain(rows),
        ts=pa.timestamp("ms", tz="Europe/Berlin"),
        host=pa.dictionary(pa.int32(), pa.string()),
        status=pa.dictionary(pa.int8(), pa.string()),
        gpu_name=pa.large_string(),
    )
    table = table.append_column("fan_speed_pct", pa.array([40.0] * table.num_rows))
    pq.write_table(table, path)


def polars_writer(rows: Sequence[dict[str, Any]], path: Path) -> None:
    frame = pl.from_arrow(_plain(rows))
    assert isinstance(frame, pl.DataFrame)
    frame.write_parquet(path)


def list_element_named_element(rows: Sequence[dict[str, Any]], path: Path) -> None:
    table = _plain(rows)
    kind = pa.list_(pa.field("element", SAMPLE_SCHEMA.field("processes").type.value_type))
    table = _retyped(table, processes=kind)
    pq.write_table(table, path)


WRITERS: list[Writer] = [
    nullable_fields,
    without_violation_and_mig_columns,
    float64_utilizations_int64_indices,
    no_stored_schema_nanoseconds,
    dictionary_strings_other_zone_extra_column,
    polars_writer,
    list_element_named_element,
]


def _files() -> dict[str, list[dict[str, Any]]]:
    """Two files of two GPUs' samples: each writer writes them its way."""
    return {
        f"{DAY}/a.parquet": rows(0) + rows(0, gpu="GPU-b"),
        f"{DAY}/b.parquet": rows(30) + rows(30, gpu="GPU-b"),
    }


def _collector_twin(tmp_path: Path) -> Config:
    """_files() as the collector writes them, ingested: once per process (every writer's
    files are compared with it) and copied under `tmp_path`."""

    def fill(folder: Path) -> None:
        for relative, file_rows in _files().items():
            write_samples(folder, relative, file_rows)
        ingest(Config(data_dir=folder), today=TODAY)

    folder = made_once("test_ingest_foreign._collector_twin", fill, tmp_path / "collector")
    return Config(data_dir=folder)


EVERYTHING = "select * exclude (processes), processes::varchar from samples order by gpu_uuid, ts"


@pytest.mark.parametrize("writer", WRITERS, ids=[w.__name__ for w in WRITERS])
def test_a_foreign_writers_files_load_in_one_pass_as_a_collectors_do(
    tmp_path: Path, writer: Writer
) -> None:
    config = Config(data_dir=tmp_path / "foreign")
    for relative, file_rows in _files().items():
        (config.data_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        writer(file_rows, config.data_dir / relative)
    result = ingest(config, today=TODAY)
    assert (result.samples_loaded, result.quarantined, result.batches_read_by_duckdb) == (12, (), 0)
    # A file with a column beyond the contract's is compacted from its files, which keep it.
    extra = writer is dictionary_strings_other_zone_extra_column
    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (1, 0 if extra else 1)
    twin = _collector_twin(tmp_path)
    expected = query(twin, EVERYTHING)
    if writer is without_violation_and_mig_columns:
        names = [name for name in SAMPLE_SCHEMA.names if name != "processes"] + ["processes"]
        missing = {names.index(n) for n in ("thermal_violation_ns", "power_violation_ns")}
        missing.add(names.index("mig_enabled"))
        expected = [
            tuple(None if i in missing else v for i, v in enumerate(row)) for row in expected
        ]
    assert query(config, EVERYTHING) == expected
    assert query(config, "select path, row_count, min_ts, max_ts from loaded_files") == query(
        twin, "select path, row_count, min_ts, max_ts from loaded_files"
    )


def test_a_batch_of_every_writer_at_once_is_read_in_one_pass(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "mixed")
    for number, writer in enumerate(WRITERS):
        path = config.data_dir / DAY / f"{number}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        writer(rows(100 * number), path)
    write_samples(config.data_dir, f"{DAY}/collector.parquet", rows(5000))
    result = ingest(config, today=TODAY)
    assert (result.samples_loaded, result.quarantined, result.batches_read_by_duckdb) == (
        3 * (len(WRITERS) + 1),
        (),
        0,
    )


def _write_plain(config: Config, relative: str, table: pa.Table) -> None:
    path = config.data_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


@pytest.mark.parametrize(
    ("table", "reason"),
    [
        (_plain([{**rows(0)[0], "host": None}]), "null in required column host"),
        (_plain([{**rows(0)[0], "ts": None}]), "null in required column ts"),
        (
            _retyped(_plain(rows(0, 1)), gpu_index=pa.int64()).set_column(
                3, "gpu_index", pa.array([70000], pa.int64())
            ),
            "column gpu_index: value 70000 does not fit USMALLINT",
        ),
        (
            _retyped(_plain(rows(0, 1)), temp_gpu_c=pa.int32()).set_column(
                14, "temp_gpu_c", pa.array([-40000], pa.int32())
            ),
            "column temp_gpu_c: value -40000 does not fit SMALLINT",
        ),
    ],
    ids=["null host", "null ts", "index too large", "temperature too small"],
)
def test_a_value_that_breaks_the_contract_is_set_aside_from_the_one_read(
    config: Config, table: pa.Table, reason: str
) -> None:
    write_samples(config.data_dir, f"{DAY}/a.parquet", rows(100))
    _write_plain(config, f"{DAY}/b.parquet", table)
    with pytest.warns(QuarantineWarning):
        result = ingest(config, today=TODAY)
    assert [(q.path, q.reason) for q in result.quarantined] == [(f"{DAY}/b.parquet", reason)]
    assert (result.samples_loaded, result.batches_read_by_duckdb) == (3, 0)


def test_a_file_whose_footer_does_not_read_is_set_aside_from_its_footer(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY}/a.parquet", rows(0))
    (config.data_dir / DAY / "b.parquet").write_bytes(b"PAR1 not parquet at all PAR1")
    with pytest.warns(QuarantineWarning):
        result = ingest(config, today=TODAY)
    (bad,) = result.quarantined
    assert bad.reason.startswith("cannot read Parquet: ")
    assert str(config.data_dir) not in bad.reason
    assert (result.samples_loaded, result.batches_read_by_duckdb) == (3, 0)


def test_a_wrong_type_is_set_aside_from_the_footer_with_the_reason_of_before(
    config: Config,
) -> None:
    write_samples(config.data_dir, f"{DAY}/a.parquet", rows(0))
    table = _plain(rows(100, 1))
    table = table.set_column(0, "ts", pa.array(["2026-11-15T09:00:00Z"]))
    _write_plain(config, f"{DAY}/b.parquet", table)
    naive = _retyped(_plain(rows(200, 1)), ts=pa.timestamp("us"))
    _write_plain(config, f"{DAY}/c.parquet", naive)
    missing = _plain(rows(300, 1)).drop_columns(["gpu_uuid"])
    _write_plain(config, f"{DAY}/d.parquet", missing)
    with pytest.warns(QuarantineWarning):
        result = ingest(config, today=TODAY)
    assert [(q.path.rsplit("/", 1)[1], q.reason) for q in result.quarantined] == [
        ("b.parquet", "column 'ts' is VARCHAR, expected TIMESTAMPTZ"),
        ("c.parquet", "column 'ts' is TIMESTAMP, expected TIMESTAMPTZ"),
        ("d.parquet", "missing required column 'gpu_uuid'"),
    ]
    assert (result.samples_loaded, result.batches_read_by_duckdb) == (3, 0)


def test_a_day_with_a_bad_file_is_not_compacted_from_the_load(config: Config) -> None:
    write_samples(config.data_dir, f"{DAY}/a.parquet", rows(0))
    _write_plain(config, f"{DAY}/b.parquet", _plain([{**rows(100)[0], "host": None}]))
    other = DAY.replace("host=h1", "host=h2")
    _write_plain(config, f"{other}/a.parquet", _plain(rows(0, gpu="GPU-c")))
    with pytest.warns(QuarantineWarning):
        result = ingest(config, today=TODAY)
    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (1, 1)
    assert query(config, "select count(*) from samples") == [(6,)]
