"""The sample columns `alloc_job_id` and `alloc_user`, added after the first release: loaded
from the files that have them, NULL from those that do not (older collectors, foreign
writers, compacted files and warehouses of an older release), through ingest, compaction,
the lake and a warehouse migrated from the older schema."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.analyst import ReadOnlyWarehouse
from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.config import Config
from gpufleet.warehouse.base.raw_tables import (
    ADDED_SAMPLE_COLUMNS,
    FIRST_RELEASE_COLUMNS,
    SAMPLE_COLUMNS,
    ensure_raw_tables,
)
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import QuarantineWarning, ingest
from gpufleet.warehouse.lake.samples import lake_source, samples_sql
from gpufleet.warehouse.publish import connect_read_only
from tests.test_incremental import MARTS, _mart
from tests.test_ingest import T0, query, read_by_duckdb, sample

pytestmark = pytest.mark.fleet

ALLOC = ("alloc_job_id", "alloc_user")
OLD_SCHEMA = pa.schema(list(SAMPLE_SCHEMA)[:FIRST_RELEASE_COLUMNS]).with_metadata(file_metadata())
OLD_COLUMNS = SAMPLE_COLUMNS[:FIRST_RELEASE_COLUMNS]
NULLABLE = pa.schema([field.with_nullable(True) for field in SAMPLE_SCHEMA])
DAY0, DAY1, DAY2 = (T0.date() + dt.timedelta(days=n) for n in (-1, 0, 1))
ROWS = "select gpu_uuid, ts, host, alloc_job_id, alloc_user from samples order by gpu_uuid, ts"


def _rows(day: dt.date, gpu: str, count: int = 3, **values: Any) -> list[dict[str, Any]]:
    """`count` samples of `gpu` on `day` from 09:00 UTC, 10 s apart, with `values` set."""
    start = dt.datetime.combine(day, T0.time(), tzinfo=dt.UTC)
    return [{**sample(10 * n, gpu=gpu, day=start), **values} for n in range(count)]


def _write(config: Config, relative: str, table: pa.Table) -> Path:
    path = config.data_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def _folder(day: dt.date, host: str = "h1") -> str:
    return f"raw/samples/date={day}/host={host}"


def _collector(rows: list[dict[str, Any]]) -> pa.Table:
    """A file as this release's collector writes it."""
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA.with_metadata(file_metadata()))


def _old_collector(rows: list[dict[str, Any]]) -> pa.Table:
    """A file as a collector before the allocation columns wrote it."""
    return pa.Table.from_pylist(
        [{k: v for k, v in row.items() if k not in ALLOC} for row in rows], schema=OLD_SCHEMA
    )


def test_the_collectors_columns_load_into_samples(config: Config) -> None:
    held = _rows(DAY1, "GPU-a", alloc_job_id="4242_7", alloc_user="alice")
    free = _rows(DAY1, "GPU-b")  # no job holds it: NULL
    _write(config, f"{_folder(DAY1)}/a.parquet", _collector(held + free))
    result = ingest(config, compact=False)
    assert (result.samples_loaded, result.batches_read_by_duckdb) == (6, 0)
    assert {row[3:] for row in query(config, ROWS)} == {("4242_7", "alice"), (None, None)}
    stored = query(config, "select count(*) from samples_stored where alloc_user = 'alice'")
    assert stored == [(3,)]


def test_a_file_of_an_older_collector_loads_with_nulls_in_the_one_pass(config: Config) -> None:
    _write(config, f"{_folder(DAY1)}/old.parquet", _old_collector(_rows(DAY1, "GPU-a")))
    _write(
        config,
        f"{_folder(DAY1)}/new.parquet",
        _collector(_rows(DAY1, "GPU-b", alloc_job_id="9", alloc_user="bob")),
    )
    result = ingest(config, compact=False)
    assert (result.samples_loaded, result.quarantined, result.batches_read_by_duckdb) == (6, (), 0)
    assert sorted({row[:1] + row[3:] for row in query(config, ROWS)}) == [
        ("GPU-a", None, None),
        ("GPU-b", "9", "bob"),
    ]


def _foreign(rows: list[dict[str, Any]], job_ids: pa.Array) -> pa.Table:
    """A plain pyarrow job's table whose alloc_job_id has the type of `job_ids`."""
    table = pa.Table.from_pylist(rows, schema=NULLABLE)
    index = table.schema.get_field_index("alloc_job_id")
    return table.set_column(index, pa.field("alloc_job_id", job_ids.type), job_ids)


@pytest.mark.parametrize("careful", [False, True], ids=["polars", "DuckDB"])
def test_integer_job_ids_of_a_foreign_writer_load_as_their_decimal_text(
    config: Config, monkeypatch: pytest.MonkeyPatch, careful: bool
) -> None:
    if careful:  # as when polars does not read a file that DuckDB reads
        read_by_duckdb(monkeypatch)
    rows = _rows(DAY1, "GPU-a", alloc_user="alice")
    ids = pa.array([4242, None, 9_007_199_254_740_993], pa.int64())  # above 2**53 too
    _write(config, f"{_folder(DAY1)}/a.parquet", _foreign(rows, ids))
    unsigned = pa.array([7, 8, 9], pa.uint32())
    _write(config, f"{_folder(DAY1)}/b.parquet", _foreign(_rows(DAY1, "GPU-b"), unsigned))
    result = ingest(config, compact=False)
    assert (result.samples_loaded, result.quarantined) == (6, ())
    assert result.batches_read_by_duckdb == (1 if careful else 0)
    assert [row[:1] + row[3:4] for row in query(config, ROWS)] == [
        ("GPU-a", "4242"),
        ("GPU-a", None),
        ("GPU-a", "9007199254740993"),
        ("GPU-b", "7"),
        ("GPU-b", "8"),
        ("GPU-b", "9"),
    ]


@pytest.mark.parametrize(
    ("job_ids", "user", "reason"),
    [
        (pa.array([1.5, 2.0, 3.0]), None, "column 'alloc_job_id' is DOUBLE, expected VARCHAR"),
        (pa.array(["1", "2", "3"]), pa.array([1, 2, 3]), "column 'alloc_user' is BIGINT"),
    ],
    ids=["float job id", "integer user"],
)
def test_other_types_of_the_columns_are_set_aside_naming_the_column(
    config: Config, job_ids: pa.Array, user: pa.Array | None, reason: str
) -> None:
    table = _foreign(_rows(DAY1, "GPU-a"), job_ids)
    if user is not None:
        index = table.schema.get_field_index("alloc_user")
        table = table.set_column(index, pa.field("alloc_user", user.type), user)
    _write(config, f"{_folder(DAY1)}/bad.parquet", table)
    _write(config, f"{_folder(DAY1)}/good.parquet", _collector(_rows(DAY1, "GPU-b")))
    with pytest.warns(QuarantineWarning):
        result = ingest(config, compact=False)
    assert result.samples_loaded == 3
    assert [item.path.rsplit("/", 1)[-1] for item in result.quarantined] == ["bad.parquet"]
    assert reason in result.quarantined[0].reason


def test_compacted_files_carry_the_columns(config: Config) -> None:
    """A host-day compacted from the load and one compacted from its files (an older
    collector's file and a newer one's) both hold the columns, NULL where unknown."""
    _write(
        config,
        f"{_folder(DAY0)}/a.parquet",
        _collector(_rows(DAY0, "GPU-a", alloc_job_id="1", alloc_user="alice")),
    )
    _write(config, f"{_folder(DAY0, 'h2')}/old.parquet", _old_collector(_rows(DAY0, "GPU-b")))
    ingest(config, compact=False)
    _write(
        config,
        f"{_folder(DAY0, 'h2')}/new.parquet",
        _collector(_rows(DAY0, "GPU-c", alloc_job_id="2", alloc_user="bob")),
    )
    result = ingest(config, today=DAY1)
    assert result.compaction is not None and result.compaction.partitions == 2
    found: dict[str, str | None] = {}
    for path in sorted(config.samples_dir.glob("date=*/host=*/compacted-*.parquet")):
        table = pq.read_table(path)
        assert table.schema.names[FIRST_RELEASE_COLUMNS:] == list(ADDED_SAMPLE_COLUMNS)
        gpus, jobs = table["gpu_uuid"].to_pylist(), table["alloc_job_id"].to_pylist()
        found.update(zip(gpus, jobs, strict=True))
    assert found == {"GPU-a": "1", "GPU-b": None, "GPU-c": "2"}


# --- a warehouse of the release before the columns -------------------------------------

_OLD_NAMES = ", ".join(f'"{name}"' for name, _ in OLD_COLUMNS)
# The tables and view the release before the allocation columns created (the rest of its
# tables have not changed; the next open creates them).
_OLD_DDL = f"""
create table samples_stored (
    {", ".join(f'"{name}" {kind}' for name, kind in OLD_COLUMNS)},
    load_id bigint not null
);
create table loaded_files (
    path varchar primary key, size_bytes bigint not null, mtime_ns bigint not null,
    row_count bigint not null, min_ts timestamptz, max_ts timestamptz,
    loaded_at timestamptz not null, content_hash bigint
);
create schema build_state;
create table build_state.lake_files (
    path varchar primary key, day date not null, row_count bigint not null,
    evicted_at timestamptz not null, load_id bigint
);
"""


def _old_file(config: Config, relative: str, table: pa.Table) -> str:
    """A file an older release loaded (written and recorded in loaded_files); its path."""
    path = _write(config, relative, table)
    stat = path.stat()
    times = table["ts"].to_pylist()
    with duckdb.connect(str(config.warehouse_path)) as con:
        con.execute(
            "insert into loaded_files"
            " values ($path, $size, $mtime, $rows, $min, $max, now(), null)",
            {
                "path": relative,
                "size": stat.st_size,
                "mtime": stat.st_mtime_ns,
                "rows": table.num_rows,
                "min": min(times),
                "max": max(times),
            },
        )
    return relative


def _old_compacted(config: Config, day: dt.date, host: str, table: pa.Table) -> str:
    """An older release's compacted file of a host-day, recorded as loaded; its path."""
    ordered = table.sort_by([("gpu_uuid", "ascending"), ("ts", "ascending")])
    return _old_file(config, f"{_folder(day, host)}/compacted-{day}.parquet", ordered)


def _old_warehouse(config: Config) -> None:
    """A warehouse as the release before the columns left it: DAY0 of h1 in the lake (an
    older compacted file, evicted), DAY1 of h1 compacted but still in samples_stored, and
    DAY1 of h2 one older collector file, loaded."""
    config.data_dir.mkdir(parents=True)
    with duckdb.connect(str(config.warehouse_path)) as con:
        con.execute(_OLD_DDL)
    lake = _old_compacted(config, DAY0, "h1", _old_collector(_rows(DAY0, "GPU-a")))
    kept = _old_collector(_rows(DAY1, "GPU-a") + _rows(DAY1, "GPU-b"))
    _old_compacted(config, DAY1, "h1", kept)
    late = _old_collector(_rows(DAY1, "GPU-c"))
    _old_file(config, f"{_folder(DAY1, 'h2')}/old.parquet", late)
    with duckdb.connect(str(config.warehouse_path)) as con:
        for table in (kept, late):
            con.register("_old", table)
            con.execute(f"insert into samples_stored select {_OLD_NAMES}, 0 from _old")
            con.unregister("_old")
        con.execute(
            "insert into build_state.lake_files values ($path, $day, 3, now(), null)",
            {"path": lake, "day": DAY0},
        )
        lake_path = str((config.data_dir / lake).absolute())
        con.execute(
            f"create view samples as select {_OLD_NAMES} from samples_stored union all "
            f"select {_OLD_NAMES} from (select {_OLD_NAMES} from read_parquet(['{lake_path}'],"
            " hive_partitioning = false))"
        )


def _everything(config: Config) -> list[tuple[Any, ...]]:
    return query(config, ROWS)


def test_a_warehouse_of_the_older_release_is_migrated_and_keeps_its_samples(
    tmp_path: Path,
) -> None:
    config = Config(data_dir=tmp_path / "data")
    _old_warehouse(config)
    before = query(config, f"select {_OLD_NAMES} from samples order by gpu_uuid, ts")
    assert len(before) == 12
    # read-only, before any write, as the older release left it: the analysts' reader too
    frame = ReadOnlyWarehouse(config).sql(f"select {_OLD_NAMES} from samples order by 5, 1")
    assert [tuple(row) for row in frame.iter_rows()] == before
    # A newer collector's file of DAY1 for h2 (compacted with the older one from the
    # files), and one of DAY2 for h1 (compacted from the load, into the lake at once).
    _write(
        config,
        f"{_folder(DAY1, 'h2')}/new.parquet",
        _collector(_rows(DAY1, "GPU-d", alloc_job_id="77", alloc_user="carol")),
    )
    _write(
        config,
        f"{_folder(DAY2)}/new.parquet",
        _collector(_rows(DAY2, "GPU-a", alloc_job_id="78", alloc_user="dave")),
    )
    result = ingest(config, today=DAY2 + dt.timedelta(days=1))
    assert (result.samples_loaded, result.quarantined, result.batches_read_by_duckdb) == (6, (), 0)
    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (2, 1)
    names = [name for name, _ in SAMPLE_COLUMNS]
    described = query(config, "select column_name from (describe samples)")
    assert [row[0] for row in described] == names
    stored = query(config, "select column_name from (describe samples_stored)")
    assert [row[0] for row in stored][-len(ADDED_SAMPLE_COLUMNS) :] == list(ADDED_SAMPLE_COLUMNS)
    # the older samples all kept, with NULL in the new columns
    older = query(
        config, f"select {_OLD_NAMES} from samples where alloc_job_id is null order by gpu_uuid, ts"
    )
    assert older == before
    expected = _everything(config)
    assert len(expected) == 18
    assert {row[3:] for row in expected} == {(None, None), ("77", "carol"), ("78", "dave")}
    comments = query(
        config,
        "select count(*) from duckdb_columns() where table_name = 'samples' and comment is null",
    )
    assert comments == [(0,)]

    # A full build (the first) evicts the compacted days: the older file as it is.
    built = build(config)
    assert built.mode == "full" and built.evicted == 12
    lake = query(config, "select path, sample_columns from build_state.lake_files order by path")
    assert [(path.split("/")[2:4], held) for path, held in lake] == [
        (["date=2026-11-15", "host=h1"], None),
        (["date=2026-11-16", "host=h1"], FIRST_RELEASE_COLUMNS),
        (["date=2026-11-16", "host=h2"], len(SAMPLE_COLUMNS)),
        (["date=2026-11-17", "host=h1"], len(SAMPLE_COLUMNS)),
    ]
    assert query(config, "select count(*) from samples_stored") == [(0,)]
    assert _everything(config) == expected
    # the analysts' reader (Arrow over the lake's files) reads the same
    frame = ReadOnlyWarehouse(config).sql(ROWS)
    assert [tuple(row) for row in frame.iter_rows()] == expected
    # Late samples of a day in the lake, and a day compacted from the load into it: an
    # incremental build reads the older files among the newer ones, as a full build does.
    late = _rows(DAY0, "GPU-z", alloc_job_id="79", alloc_user="erin")
    _write(config, f"{_folder(DAY0)}/late.parquet", _collector(late))
    day3 = DAY2 + dt.timedelta(days=1)
    _write(config, f"{_folder(day3)}/new.parquet", _collector(_rows(day3, "GPU-a")))
    ingest(config, today=day3 + dt.timedelta(days=1))
    assert build(config).mode == "incremental"
    expected = _everything(config)
    assert len(expected) == 24 and expected[-3:] == [
        ("GPU-z", row["ts"], "h1", "79", "erin") for row in late
    ]
    with connect_read_only(config) as con:
        marts = {name: _mart(con, name) for name in MARTS}
    assert build(config, full=True).mode == "full"
    assert _everything(config) == expected
    with connect_read_only(config) as con:
        assert {name: _mart(con, name) for name in MARTS} == marts


def test_lake_files_with_and_without_the_columns_read_together(config: Config) -> None:
    """By the count of columns `lake_files` records for each, or by each file's footer."""
    old = _write(config, "old.parquet", _old_collector(_rows(DAY0, "GPU-a")))
    new = _write(
        config, "new.parquet", _collector(_rows(DAY0, "GPU-b", alloc_job_id="5", alloc_user="e"))
    )
    paths = [str(old), str(new)]
    held = {str(old): FIRST_RELEASE_COLUMNS, str(new): len(SAMPLE_COLUMNS)}
    with duckdb.connect() as con:
        ensure_raw_tables(con)
        for source in (lake_source(paths), lake_source(held), samples_sql(held)):
            rows = con.execute(
                f"select gpu_uuid, alloc_job_id, alloc_user from ({source}) order by all"
            ).fetchall()
            assert sorted(set(rows)) == [("GPU-a", None, None), ("GPU-b", "5", "e")]
        keys = con.execute(f"select count(*) from ({samples_sql(held, columns=('ts',))})")
        assert keys.fetchall() == [(6,)]
