"""Compaction: one sorted lz4 file per host per completed day, swapped in atomically."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.base import ensure_raw_tables
from gpufleet.warehouse.lake import compact_completed_days
from gpufleet.warehouse.lake.compact_task import run_compact_task
from gpufleet.warehouse.lake.fanout import CompactFanOut, CompactTask, CompactTaskResult
from gpufleet.warehouse.publish import connect_read_only

pytestmark = pytest.mark.fleet

DAY = dt.date(2026, 11, 16)


def sample_rows(start: dt.datetime, ticks: int, uuids: tuple[str, ...]) -> pa.Table:
    rows = [
        {
            "ts": start + dt.timedelta(seconds=10 * (tick + 1)),
            "interval_s": 10.0,
            "host": "node 1",
            "gpu_index": index,
            "gpu_uuid": uuid,
            "status": "ok",
            "gpu_util_pct": float(tick),
        }
        for tick in range(ticks)
        for index, uuid in enumerate(uuids)
    ]
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA.with_metadata(file_metadata()))


@pytest.fixture
def lake(tmp_path: Path) -> tuple[Config, duckdb.DuckDBPyConnection]:
    config = Config(data_dir=tmp_path)
    con = duckdb.connect()
    ensure_raw_tables(con)
    return config, con


def write_and_record(
    config: Config,
    con: duckdb.DuckDBPyConnection,
    day: dt.date,
    name: str,
    table: pa.Table,
    *,
    record: bool = True,
) -> str:
    directory = config.samples_dir / f"date={day.isoformat()}" / "host=node-1"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    pq.write_table(table, path, compression="zstd")
    relative = path.relative_to(config.data_dir).as_posix()
    if record:
        con.execute(
            "insert into loaded_files (path, size_bytes, mtime_ns, row_count, min_ts, max_ts,"
            " loaded_at) values (?, ?, ?, ?, ?, ?, now())",
            [
                relative,
                path.stat().st_size,
                path.stat().st_mtime_ns,
                table.num_rows,
                min(table["ts"].to_pylist()),
                max(table["ts"].to_pylist()),
            ],
        )
    return relative


def loaded_files_rows(config: Config) -> list[tuple[Any, ...]]:
    """The warehouse's loaded_files as the tests compare them (not the load's times), by
    path."""
    with connect_read_only(config) as con:
        return con.execute(
            "select path, size_bytes, row_count, min_ts, max_ts, content_hash from loaded_files"
            " order by path"
        ).fetchall()


def midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)


def test_completed_day_becomes_one_sorted_file(
    lake: tuple[Config, duckdb.DuckDBPyConnection],
) -> None:
    config, con = lake
    uuids = ("GPU-b", "GPU-a")
    for part in range(3):
        start = midnight(DAY) + dt.timedelta(minutes=10 * part)
        write_and_record(config, con, DAY, f"f{part}.parquet", sample_rows(start, 60, uuids))

    result = compact_completed_days(con, config, today=DAY + dt.timedelta(days=1))

    directory = config.samples_dir / f"date={DAY}" / "host=node-1"
    files = sorted(p.name for p in directory.iterdir())
    assert files == [f"compacted-{DAY}.parquet"]
    assert result.partitions == 1 and result.files_replaced == 3
    table = pq.read_table(directory / files[0])
    assert table.num_rows == 3 * 60 * 2
    keys = list(zip(table["gpu_uuid"].to_pylist(), table["ts"].to_pylist(), strict=True))
    assert keys == sorted(keys)
    footer = pq.read_metadata(directory / files[0])
    assert footer.row_group(0).column(0).compression == "LZ4"
    with_statistics = {
        footer.schema.column(i).path
        for i in range(footer.num_columns)
        if footer.row_group(0).column(i).statistics is not None
    }
    assert with_statistics == {"ts", "gpu_uuid", "host", "gpu_index", "status"}
    assert table.schema.metadata[b"gpufleet.schema_version"] == b"1"
    assert table.column_names == SAMPLE_SCHEMA.names  # no `date` column from the folder name
    assert set(table["host"].to_pylist()) == {"node 1"}  # the file's host, not the folder's
    for name in ("ts", "gpu_index", "interval_s", "gpu_util_pct"):
        assert table.schema.field(name).type == SAMPLE_SCHEMA.field(name).type
    loaded = con.execute("select path, row_count from loaded_files").fetchall()
    assert loaded == [(f"raw/samples/date={DAY}/host=node-1/compacted-{DAY}.parquet", 360)]
    assert not any(p.name.startswith(".") for p in directory.parent.iterdir())


def test_today_and_partly_loaded_days_are_left_alone(
    lake: tuple[Config, duckdb.DuckDBPyConnection],
) -> None:
    config, con = lake
    today = DAY + dt.timedelta(days=1)
    write_and_record(config, con, today, "a.parquet", sample_rows(midnight(today), 6, ("GPU-a",)))
    write_and_record(config, con, today, "b.parquet", sample_rows(midnight(today), 6, ("GPU-b",)))
    write_and_record(config, con, DAY, "a.parquet", sample_rows(midnight(DAY), 6, ("GPU-a",)))
    write_and_record(
        config, con, DAY, "late.parquet", sample_rows(midnight(DAY), 6, ("GPU-b",)), record=False
    )

    result = compact_completed_days(con, config, today=today)

    assert result.partitions == 0
    assert len(list((config.samples_dir / f"date={today}" / "host=node-1").iterdir())) == 2
    assert len(list((config.samples_dir / f"date={DAY}" / "host=node-1").iterdir())) == 2


def test_late_file_after_compaction_is_merged_next_time(
    lake: tuple[Config, duckdb.DuckDBPyConnection],
) -> None:
    config, con = lake
    today = DAY + dt.timedelta(days=1)
    write_and_record(config, con, DAY, "a.parquet", sample_rows(midnight(DAY), 6, ("GPU-a",)))
    write_and_record(config, con, DAY, "b.parquet", sample_rows(midnight(DAY), 6, ("GPU-b",)))
    compact_completed_days(con, config, today=today)
    write_and_record(config, con, DAY, "late.parquet", sample_rows(midnight(DAY), 6, ("GPU-c",)))

    result = compact_completed_days(con, config, today=today)

    directory = config.samples_dir / f"date={DAY}" / "host=node-1"
    assert result.partitions == 1
    assert [p.name for p in directory.iterdir()] == [f"compacted-{DAY}.parquet"]
    assert pq.read_table(directory / f"compacted-{DAY}.parquet").num_rows == 18
    assert con.execute("select sum(row_count) from loaded_files").fetchone() == (18,)


def test_ingest_compacts_loaded_days_and_never_reloads_them(tmp_path: Path) -> None:
    from gpufleet.warehouse.ingest import ingest

    config = Config(data_dir=tmp_path)
    con = duckdb.connect()
    ensure_raw_tables(con)
    for part in range(4):
        start = midnight(DAY) + dt.timedelta(minutes=10 * part)
        write_and_record(
            config,
            con,
            DAY,
            f"f{part}.parquet",
            sample_rows(start, 60, ("GPU-a", "GPU-b")),
            record=False,
        )

    first = ingest(config)
    second = ingest(config)

    assert first.samples_loaded == 4 * 60 * 2
    assert first.compaction is not None and first.compaction.files_replaced == 4
    directory = config.samples_dir / f"date={DAY}" / "host=node-1"
    assert [p.name for p in directory.iterdir()] == [f"compacted-{DAY}.parquet"]
    assert second.files_loaded == 0 and second.samples_loaded == 0
    with duckdb.connect(str(config.warehouse_path), read_only=True) as warehouse:
        assert warehouse.execute("select count(*) from samples").fetchone() == (480,)
        assert warehouse.execute("select count(*) from loaded_files").fetchone() == (1,)


def test_file_names_with_glob_characters_compact_as_themselves(tmp_path: Path) -> None:
    """`f[1].parquet` is that file to the compaction, not a pattern matching `f1.parquet`."""
    from gpufleet.warehouse.ingest import ingest

    config = Config(data_dir=tmp_path)
    con = duckdb.connect()
    ensure_raw_tables(con)
    for part, name in enumerate(("f1.parquet", "f[1].parquet")):
        start = midnight(DAY) + dt.timedelta(minutes=10 * part)
        table = sample_rows(start, 60, ("GPU-a",))
        write_and_record(config, con, DAY, name, table, record=False)

    result = ingest(config)

    assert result.compaction is not None and result.compaction.files_replaced == 2
    directory = config.samples_dir / f"date={DAY}" / "host=node-1"
    compacted = pq.read_table(directory / f"compacted-{DAY}.parquet")
    assert compacted.num_rows == 2 * 60
    assert compacted["ts"].to_pylist() == sorted(set(compacted["ts"].to_pylist()))


def test_a_loaded_file_gone_bad_is_quarantined_and_ingest_goes_on(tmp_path: Path) -> None:
    """A past day's file overwritten after its load must not make ingest fail (review)."""
    from gpufleet.warehouse.ingest import ingest

    config = Config(data_dir=tmp_path)
    con = duckdb.connect()
    ensure_raw_tables(con)
    for name in ("a.parquet", "b.parquet"):
        write_and_record(
            config,
            con,
            DAY,
            name,
            sample_rows(midnight(DAY), 6, (f"GPU-{name[0]}",)),
            record=False,
        )
    other = DAY - dt.timedelta(days=1)
    write_and_record(
        config, con, other, "c.parquet", sample_rows(midnight(other), 6, ("GPU-c",)), record=False
    )
    ingest(config, compact=False)
    bad = config.samples_dir / f"date={DAY}" / "host=node-1" / "b.parquet"
    bad.write_bytes(b"not parquet any more")

    with pytest.warns(UserWarning, match="changed after load"):
        result = ingest(config)

    assert [item.path for item in result.quarantined] == [bad.relative_to(tmp_path).as_posix()]
    assert result.compaction is not None and result.compaction.partitions == 1  # `other` only
    assert (config.quarantine_dir / bad.relative_to(tmp_path)).read_bytes().startswith(b"not")
    assert (config.samples_dir / f"date={DAY}" / "host=node-1" / "a.parquet").exists()
    assert (
        config.samples_dir / f"date={other}" / "host=node-1" / f"compacted-{other}.parquet"
    ).exists()


def test_compacted_file_has_the_contract_types_whatever_the_sources(
    lake: tuple[Config, duckdb.DuckDBPyConnection],
) -> None:
    config, con = lake
    table = sample_rows(midnight(DAY), 6, ("GPU-a",))
    older = table.drop_columns(["gpu_name", "processes"]).set_column(
        table.schema.get_field_index("ts") - 0,
        pa.field("ts", pa.timestamp("ns", tz="UTC"), nullable=False),
        table["ts"].cast(pa.timestamp("ns", tz="UTC")),
    )
    mask_index = older.schema.get_field_index("clock_event_mask")
    older = older.set_column(
        mask_index,
        pa.field("clock_event_mask", pa.int64()),
        older["clock_event_mask"].cast(pa.int64()),
    )
    newer = sample_rows(midnight(DAY) + dt.timedelta(minutes=1), 6, ("GPU-a",))
    newer = newer.append_column("fan_speed_pct", pa.array([40.0] * newer.num_rows, pa.float32()))
    write_and_record(config, con, DAY, "older.parquet", older)
    write_and_record(config, con, DAY, "newer.parquet", newer)

    compact_completed_days(con, config, today=DAY + dt.timedelta(days=1))

    path = config.samples_dir / f"date={DAY}" / "host=node-1" / f"compacted-{DAY}.parquet"
    schema = pq.read_schema(path)
    for field in SAMPLE_SCHEMA:
        assert schema.field(field.name).type == field.type, field.name
        assert schema.field(field.name).nullable or not field.nullable, field.name
    assert schema.field("gpu_name").nullable
    assert schema.names[-1] == "fan_speed_pct"
    assert schema.metadata[b"gpufleet.collector_version"] == b"0.1.0"
    assert pq.read_table(path).num_rows == 12


def test_compacted_file_encodes_times_and_counters_compactly_and_reads_back_the_same(
    lake: tuple[Config, duckdb.DuckDBPyConnection],
) -> None:
    config, con = lake
    uuids = ("GPU-a", "GPU-b")
    sources = []
    for part in range(2):
        table = sample_rows(midnight(DAY) + dt.timedelta(minutes=10 * part), 60, uuids)
        ticks = range(part * 60, part * 60 + table.num_rows // 2)
        table = (
            table.set_column(
                table.schema.get_field_index("energy_mj"),
                "energy_mj",
                pa.array([1_000_000 + 3_017 * t for t in ticks for _ in uuids], pa.int64()),
            )
            .set_column(
                table.schema.get_field_index("power_w"),
                "power_w",
                pa.array([300.0 + 0.37 * (t % 11) for t in ticks for _ in uuids], pa.float32()),
            )
            .set_column(
                table.schema.get_field_index("pcie_rx_bytes_s"),
                "pcie_rx_bytes_s",
                pa.array([2e7 + 1.3e5 * (t % 7) for t in ticks for _ in uuids], pa.float64()),
            )
            .set_column(
                table.schema.get_field_index("processes"),
                "processes",
                pa.array(
                    [[{"pid": 7, "user": "alice", "used_mem_bytes": 1 << 30, "job_id": "42"}]]
                    * table.num_rows,
                    SAMPLE_SCHEMA.field("processes").type,
                ),
            )
        )
        sources.append(table)
        write_and_record(config, con, DAY, f"f{part}.parquet", table)
    before = pa.concat_tables(sources).sort_by([("gpu_uuid", "ascending"), ("ts", "ascending")])

    compact_completed_days(con, config, today=DAY + dt.timedelta(days=1))

    path = config.samples_dir / f"date={DAY}" / "host=node-1" / f"compacted-{DAY}.parquet"
    group = pq.read_metadata(path).row_group(0)
    encodings = {
        group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)
    }
    for column in ("ts", "energy_mj"):
        assert "DELTA_BINARY_PACKED" in encodings[column]
    # every float of the contract: the measured ones, the activity columns among them
    floats = [field.name for field in SAMPLE_SCHEMA if pa.types.is_floating(field.type)]
    assert {"power_w", "sm_active_pct", "pcie_rx_bytes_s"} <= set(floats)
    for column in floats:
        assert "BYTE_STREAM_SPLIT" in encodings[column], column
    for column in ("host", "gpu_uuid"):
        assert "RLE_DICTIONARY" in encodings[column]
    assert "RLE_DICTIONARY" not in encodings["processes.list.element.user"]
    # pyarrow and DuckDB read the values that went in
    names = SAMPLE_SCHEMA.names
    assert pq.read_table(path).select(names).equals(before.select(names))
    reader = duckdb.connect()
    read_back = reader.execute(
        "select sum(epoch_us(ts)), sum(energy_mj), sum(power_w::double), "
        "sum(pcie_rx_bytes_s), count(*) from read_parquet(?)",
        [str(path)],
    ).fetchone()
    assert read_back == (
        sum(int(ts.timestamp() * 1_000_000) for ts in before["ts"].to_pylist()),
        sum(before["energy_mj"].to_pylist()),
        pytest.approx(sum(before["power_w"].to_pylist())),
        pytest.approx(sum(before["pcie_rx_bytes_s"].to_pylist())),
        before.num_rows,
    )


# --- a replaced file that comes back -----------------------------------------------------


def _put_back(config: Config, name: str, table: pa.Table) -> Path:
    """Write `name` (again) in the host-day's folder (an object overwritten in the bucket
    and copied again, a file restored from a backup), plain: other values of a float
    column leave its size as it was."""
    path = config.samples_dir / f"date={DAY}" / "host=node-1" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="none", use_dictionary=False)
    return path


def _samples(config: Config) -> list[tuple[object, ...]]:
    with duckdb.connect(str(config.warehouse_path), read_only=True) as warehouse:
        return warehouse.execute(
            "select gpu_uuid, ts, gpu_util_pct from samples order by all"
        ).fetchall()


@pytest.mark.parametrize("way", ["from its files", "from the load, into the lake"])
def test_a_replaced_file_back_with_other_rows_is_quarantined_as_changed_after_load(
    tmp_path: Path, way: str
) -> None:
    """The rule for a file changed after its load holds whether or not its host-day was
    compacted since (#56): the compacted file names the files it replaced."""
    from gpufleet.warehouse.ingest import ingest

    config = Config(data_dir=tmp_path)
    original = sample_rows(midnight(DAY), 60, ("GPU-a", "GPU-b"))
    size = _put_back(config, "a.parquet", original).stat().st_size
    _put_back(config, "b.parquet", sample_rows(midnight(DAY), 60, ("GPU-c",)))
    if way == "from its files":
        ingest(config, compact=False)
    first = ingest(config)
    assert first.compaction is not None and first.compaction.partitions == 1
    with duckdb.connect(str(config.warehouse_path), read_only=True) as warehouse:
        in_lake = warehouse.execute("select count(*) from build_state.lake_files").fetchone()
    assert in_lake == ((1,) if way == "from the load, into the lake" else (0,))
    before = _samples(config)
    edited = original.set_column(
        original.schema.get_field_index("gpu_util_pct"),
        "gpu_util_pct",
        pa.array([99.0] * original.num_rows, pa.float32()),
    )
    back = _put_back(config, "a.parquet", edited)
    assert back.stat().st_size == size  # only its rows tell

    with pytest.warns(UserWarning, match="changed after load"):
        result = ingest(config)

    relative = back.relative_to(tmp_path).as_posix()
    assert [item.path for item in result.quarantined] == [relative]
    (reason,) = [item.reason for item in result.quarantined]
    assert reason.startswith(
        f"changed after load (was {size:,} bytes when compacted-{DAY}.parquet replaced it; "
        f"now {size:,} bytes, mtime "
    )
    assert (result.files_loaded, result.samples_loaded, result.duplicates_skipped) == (0, 0, 0)
    assert not back.exists() and (config.quarantine_dir / relative).exists()
    assert _samples(config) == before
    with duckdb.connect(str(config.warehouse_path), read_only=True) as warehouse:
        assert warehouse.execute("select path, reason from quarantined_files").fetchall() == [
            (relative, reason)
        ]


def test_a_replaced_file_back_with_the_same_rows_loads_and_is_compacted_in_again(
    tmp_path: Path,
) -> None:
    """The same rows again are no change: the file loads (its samples all duplicates) and
    its host-day is compacted again, the new compacted file naming the files the old one
    replaced, so that a later edit of one is still caught."""
    from gpufleet.warehouse.ingest import ingest

    config = Config(data_dir=tmp_path)
    tables = {
        name: sample_rows(midnight(DAY), 60, (f"GPU-{name[0]}",))
        for name in ("a.parquet", "b.parquet")
    }
    for name, table in tables.items():
        _put_back(config, name, table)
    ingest(config, compact=False)
    ingest(config)
    before = _samples(config)
    _put_back(config, "a.parquet", tables["a.parquet"])

    again = ingest(config)

    assert again.quarantined == ()
    assert (again.files_loaded, again.samples_loaded, again.duplicates_skipped) == (1, 0, 60)
    assert again.compaction is not None and again.compaction.partitions == 1
    directory = config.samples_dir / f"date={DAY}" / "host=node-1"
    assert [p.name for p in directory.iterdir()] == [f"compacted-{DAY}.parquet"]
    assert _samples(config) == before
    b = tables["b.parquet"]
    edited = b.set_column(
        b.schema.get_field_index("gpu_util_pct"),
        "gpu_util_pct",
        pa.array([99.0] * b.num_rows, pa.float32()),
    )
    back = _put_back(config, "b.parquet", edited)

    with pytest.warns(UserWarning, match="changed after load"):
        result = ingest(config)

    assert [item.path for item in result.quarantined] == [back.relative_to(tmp_path).as_posix()]
    assert _samples(config) == before


def _fan_out(
    config: Config, run: Callable[[Sequence[CompactTask]], list[CompactTaskResult]]
) -> CompactFanOut:
    return CompactFanOut(config=config, run=run, workers=lambda: 1)


def test_a_late_task_of_a_compaction_given_up_writes_nothing_the_next_one_swaps_in(
    lake: tuple[Config, duckdb.DuckDBPyConnection],
) -> None:
    """A compaction on Dask given up while its task still runs on a (remote) worker, then a
    late file, and the next compaction: the old task, ending late, writes the day without the
    late file's rows into its own run's staging folder, never into the new run's."""
    config, con = lake
    today = DAY + dt.timedelta(days=1)
    write_and_record(config, con, DAY, "a.parquet", sample_rows(midnight(DAY), 6, ("GPU-a",)))
    write_and_record(config, con, DAY, "b.parquet", sample_rows(midnight(DAY), 6, ("GPU-b",)))
    given_up: list[CompactTask] = []

    def give_up(tasks: Sequence[CompactTask]) -> list[CompactTaskResult]:
        given_up.extend(tasks)
        raise GpufleetError("ingest failed: no answer from the Dask workers")

    with pytest.raises(GpufleetError, match="no answer"):
        compact_completed_days(con, config, today=today, fan_out=_fan_out(config, give_up))
    write_and_record(config, con, DAY, "late.parquet", sample_rows(midnight(DAY), 6, ("GPU-c",)))

    def with_a_late_writer(tasks: Sequence[CompactTask]) -> list[CompactTaskResult]:
        results = [run_compact_task(task) for task in tasks]
        for task in given_up:  # past its checks before it was given up: its folders are there
            Path(task.temp_dir).mkdir(parents=True, exist_ok=True)
            for host_day in task.host_days:
                Path(host_day.target).parent.mkdir(exist_ok=True)
            run_compact_task(task)
        return results

    result = compact_completed_days(
        con, config, today=today, fan_out=_fan_out(config, with_a_late_writer)
    )
    directory = config.samples_dir / f"date={DAY}" / "host=node-1"
    assert result.partitions == 1
    assert [p.name for p in directory.iterdir()] == [f"compacted-{DAY}.parquet"]
    assert pq.read_table(directory / f"compacted-{DAY}.parquet").num_rows == 18
    assert con.execute("select sum(row_count) from loaded_files").fetchone() == (18,)
    assert [p.name for p in directory.parent.iterdir()] == ["host=node-1"]  # the late one's too


def test_what_dead_runs_left_goes_at_the_next_compaction(
    lake: tuple[Config, duckdb.DuckDBPyConnection],
) -> None:
    """Staging folders of runs that died (either naming) and their scratch folders go; the
    lake's folders and files stay, and so does a build's scratch folder (a build's own)."""
    config, con = lake
    write_and_record(config, con, DAY, "a.parquet", sample_rows(midnight(DAY), 6, ("GPU-a",)))
    other = config.samples_dir / "date=2026-11-10"
    for name in (".host=node-1.compacting", ".host=node 2.compacting-0123456789ab"):
        (other / name).mkdir(parents=True)
        (other / name / f"compacted-{DAY}.parquet").write_bytes(b"a dead run's")
    (other / "host=node-1").mkdir()
    scratch = config.data_dir / "scratch"
    for name in ("compact-0123/spill/00000", "build-4567/partials"):
        (scratch / name).mkdir(parents=True)

    def here(tasks: Sequence[CompactTask]) -> list[CompactTaskResult]:
        return [run_compact_task(task) for task in tasks]

    fan_out = _fan_out(config, here)
    result = compact_completed_days(con, config, today=DAY + dt.timedelta(days=1), fan_out=fan_out)

    assert result.partitions == 1 and fan_out.last is not None and fan_out.last.tasks == 1
    assert [p.name for p in other.iterdir()] == ["host=node-1"]
    assert [p.name for p in (config.samples_dir / f"date={DAY}").iterdir()] == ["host=node-1"]
    assert [p.name for p in scratch.iterdir()] == ["build-4567"]
