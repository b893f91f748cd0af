"""Compaction from the rows as ingest loads them: a backfill reads each file once, and the
file it writes is the one compaction from the files would write."""

from __future__ import annotations

import datetime as dt
import shutil
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.collectors.writer import SampleWriteError
from gpufleet.config import Config
from gpufleet.warehouse.ingest import SampleFile, find_sample_files, ingest, pipeline, plan_batches
from gpufleet.warehouse.ingest import load_warehouse as load
from gpufleet.warehouse.ingest.check import read_and_check
from gpufleet.warehouse.lake import compact_ahead, compact_completed_days
from gpufleet.warehouse.publish import connect_read_only, write_transaction
from gpufleet.warehouse.refs import read_references
from tests.test_ingest import sample, write_samples, write_table

DAY = dt.date(2026, 11, 16)
T0 = dt.datetime.combine(DAY, dt.time(), tzinfo=dt.UTC)
TODAY = DAY + dt.timedelta(days=1)


def host_day(host: str, day: dt.date = DAY) -> str:
    return f"raw/samples/date={day.isoformat()}/host={host}"


def write_host_day(data_dir: Path, host: str, files: int = 3) -> None:
    """`files` ten-minute files of two GPUs, written out of key order on purpose."""
    for part in range(files):
        rows = [
            sample(600 * part + 10 * tick, gpu=gpu, util=float(tick), day=T0)
            for gpu in (f"GPU-z-{host}", f"GPU-a-{host}")
            for tick in range(60)
        ]
        write_samples(data_dir, f"{host_day(host)}/{host}-{part}.parquet", rows)


def compacted(config: Config, host: str) -> pa.Table:
    directory = config.data_dir / host_day(host)
    names = [p.name for p in directory.iterdir()]
    assert names == [f"compacted-{DAY}.parquet"]
    return pq.read_table(directory / names[0])


def test_a_backfill_compacts_each_host_day_from_the_rows_it_loads(
    config: Config, tmp_path: Path
) -> None:
    for host in ("h1", "h2"):
        write_host_day(config.data_dir, host)
    twin = Config(data_dir=tmp_path / "twin")
    shutil.copytree(config.data_dir, twin.data_dir)

    result = ingest(config, today=TODAY)

    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (2, 2)
    assert "(2 from the load, 0 re-read)" in str(result)
    # The same files compacted the other way (loaded, then re-read): the same file.
    ingest(twin, compact=False)
    with write_transaction(twin) as con:
        again = compact_completed_days(con, twin, today=TODAY)
    assert (again.partitions, again.from_load) == (2, 0)
    for host in ("h1", "h2"):
        ahead, reread = compacted(config, host), compacted(twin, host)
        assert ahead.num_rows == 3 * 60 * 2
        assert ahead.equals(reread)
        assert ahead.schema.metadata == reread.schema.metadata
        files = [config.data_dir / host_day(host), twin.data_dir / host_day(host)]
        groups = [pq.ParquetFile(next(d.iterdir())).metadata.num_row_groups for d in files]
        assert groups == [2, 2]  # one per GPU either way
    assert not [p for p in config.samples_dir.rglob(".*")]  # no staging left behind
    # Straight into the lake: no sample of theirs in the warehouse file, each file listed
    # with the load that wrote it, and the `samples` view reads them.
    with connect_read_only(config) as con:
        stored = con.execute("select count(*) from samples_stored").fetchall()
        lake = con.execute("select path, row_count, load_id from build_state.lake_files").fetchall()
        in_view = con.execute("select count(*) from samples").fetchall()
    assert stored == [(0,)] and in_view == [(2 * 3 * 60 * 2,)]
    assert sorted(path for path, _, _ in lake) == [
        f"{host_day(host)}/compacted-{DAY}.parquet" for host in ("h1", "h2")
    ]
    assert {(rows, load) for _, rows, load in lake} == {(360, 1)}


@pytest.mark.parametrize(
    "order",
    ["files named against time order", "rows of a file against time order", "in time order"],
)
def test_a_days_rows_are_compacted_by_gpu_and_time_whatever_order_they_come_in(
    config: Config, order: str
) -> None:
    """The read sorts by GPU alone, keeping the order rows come in, when that already puts
    each GPU's samples in time order (a collector's files): files whose names sort against
    their times, or a file whose rows run backwards, are sorted by time as well."""
    for part in range(3):
        name = 2 - part if order == "files named against time order" else part
        ticks = range(60)[:: -1 if order == "rows of a file against time order" else 1]
        rows = [
            sample(600 * part + 10 * tick, gpu=gpu, util=float(tick), day=T0)
            for tick in ticks
            for gpu in ("GPU-z", "GPU-a")
        ]
        write_samples(config.data_dir, f"{host_day('h1')}/h1-{name}.parquet", rows)

    result = ingest(config, today=TODAY)

    assert result.compaction is not None and result.compaction.from_load == 1
    table = compacted(config, "h1")
    gpus, times = table.column("gpu_uuid").to_pylist(), table.column("ts").to_pylist()
    keys = list(zip(gpus, times, strict=True))
    assert keys == sorted(keys) and len(set(keys)) == len(keys) == 2 * 3 * 60
    util = table.column("gpu_util_pct").to_pylist()  # each row's values came along with it
    assert util[:3] == [0.0, 1.0, 2.0]


def test_a_copy_of_a_written_days_rows_in_a_later_batch_is_a_duplicate(config: Config) -> None:
    write_host_day(config.data_dir, "h1", files=1)
    copied = pq.read_table(config.data_dir / host_day("h1") / "h1-0.parquet")
    next_day = DAY + dt.timedelta(days=1)
    write_table(config.data_dir, f"{host_day('h2', next_day)}/copy.parquet", copied)

    result = ingest(config, today=next_day + dt.timedelta(days=1))

    assert result.batches == 2  # one per date: h1's day is written before h2's is read
    assert (result.samples_loaded, result.duplicates_skipped) == (120, 120)
    assert result.compaction is not None and result.compaction.from_load == 1
    with connect_read_only(config) as con:
        assert con.execute("select count(*) from samples").fetchall() == [(120,)]


def test_a_day_loaded_in_pieces_is_compacted_from_its_files(config: Config) -> None:
    write_host_day(config.data_dir, "h1", files=2)
    first = ingest(config, today=DAY)  # the day is not over: nothing compacted
    assert first.compaction is not None and first.compaction.partitions == 0
    late = [sample(1200 + 10 * tick, gpu="GPU-a", day=T0) for tick in range(60)]
    write_samples(config.data_dir, f"{host_day('h1')}/h1-2.parquet", late)

    result = ingest(config, today=TODAY)

    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (1, 0)
    assert compacted(config, "h1").num_rows == 2 * 60 * 2 + 60


def test_a_newer_collectors_extra_column_is_kept_by_compacting_from_the_files(
    config: Config,
) -> None:
    write_host_day(config.data_dir, "h1", files=1)
    rows = pa.Table.from_pylist([sample(600 + 10 * tick, day=T0) for tick in range(6)])
    extra = rows.append_column("fan_speed_pct", pa.array([40.0] * 6, pa.float32()))
    write_table(config.data_dir, f"{host_day('h1')}/h1-9.parquet", extra)

    result = ingest(config, today=TODAY)

    assert result.compaction is not None
    assert (result.compaction.partitions, result.compaction.from_load) == (1, 0)
    table = compacted(config, "h1")
    assert table.num_rows == 60 * 2 + 6
    assert table.column("fan_speed_pct").drop_null().to_pylist() == [40.0] * 6


def ingest_onto_a_full_disk(config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest whose compacted files cannot be written (a full disk) fails with that
    error; the patches are undone after it."""

    def disk_full(table: pa.Table, target: Path, **_: object) -> None:
        raise SampleWriteError(f"cannot write {target}: No space left on device")

    monkeypatch.setattr(compact_ahead, "write_compacted", disk_full)
    with pytest.raises(SampleWriteError, match="No space left on device"):
        ingest(config, today=TODAY)
    monkeypatch.undo()


def test_a_compacted_file_that_cannot_be_written_fails_the_ingest_and_loses_nothing(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are written in a thread of their own: its error (a full disk) reaches the
    ingest, which publishes nothing; the next ingest loads and compacts everything."""
    for host in ("h1", "h2"):
        write_host_day(config.data_dir, host)

    ingest_onto_a_full_disk(config, monkeypatch)

    assert len(find_sample_files(config)) == 6  # the collector files are untouched
    result = ingest(config, today=TODAY)
    assert result.samples_loaded == 2 * 3 * 60 * 2
    assert result.compaction is not None and result.compaction.from_load == 2
    assert compacted(config, "h1").num_rows == 3 * 60 * 2
    assert not [p for p in config.samples_dir.rglob(".*")]


def test_a_write_failing_while_the_next_batch_is_read_fails_the_ingest_cleanly(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three days, three batches: the first batch's failed write surfaces in the second's
    load, while the third batch is read in a thread of its own; the ingest raises the
    write's error, leaves no reading thread behind, and the next ingest loads and compacts
    all three days."""
    days = [DAY - dt.timedelta(days=back) for back in (2, 1, 0)]
    for day in days:
        start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
        rows = [sample(10 * tick, gpu="GPU-a", day=start) for tick in range(60)]
        write_samples(config.data_dir, f"{host_day('h1', day)}/h1-0.parquet", rows)
    assert len(plan_batches(find_sample_files(config))) == 3

    reads: list[int] = []

    def recording_read(config: Config, batch: Any, ahead: Any, limits: Any) -> Any:
        reads.append(len(batch))
        return read_and_check(config, batch, ahead, limits)

    monkeypatch.setattr(pipeline, "read_and_check", recording_read)
    ingest_onto_a_full_disk(config, monkeypatch)
    assert len(reads) >= 2  # the next batch was being read when the write failed
    assert not [t for t in threading.enumerate() if t.name.startswith("gpufleet-read")]

    result = ingest(config, today=TODAY)
    assert result.samples_loaded == 3 * 60
    assert result.compaction is not None and result.compaction.from_load == 3
    for day in days:
        names = [p.name for p in (config.data_dir / host_day("h1", day)).iterdir()]
        assert names == [f"compacted-{day}.parquet"]


def test_a_file_arriving_during_the_ingest_keeps_the_day_as_it_is(config: Config) -> None:
    write_host_day(config.data_dir, "h1", files=2)
    listing = find_sample_files(config)
    late = [sample(1200 + 10 * tick, gpu="GPU-a", day=T0) for tick in range(60)]
    write_samples(config.data_dir, f"{host_day('h1')}/h1-2.parquet", late)

    # The ingest listed the directory before the late file came: it writes the day ahead
    # from the two files, and compaction, seeing a file not loaded, leaves the day alone.
    result = load(config, read_references(config), listing, today=TODAY)

    assert result.compaction is not None and result.compaction.partitions == 0
    with connect_read_only(config) as con:  # its rows went into the warehouse file after all
        stored = con.execute("select count(*) from samples_stored").fetchall()
        lake = con.execute("select count(*) from build_state.lake_files").fetchall()
    assert (stored, lake) == ([(2 * 60 * 2,)], [(0,)])
    directory = config.data_dir / host_day("h1")
    assert sorted(p.name for p in directory.iterdir()) == [
        "h1-0.parquet",
        "h1-1.parquet",
        "h1-2.parquet",
    ]
    assert not [p for p in config.samples_dir.rglob(".*")]
    # The next ingest loads it and compacts the day from its files.
    after = ingest(config, today=TODAY)
    assert after.compaction is not None
    assert (after.compaction.partitions, after.compaction.from_load) == (1, 0)
    assert compacted(config, "h1").num_rows == 2 * 60 * 2 + 60


def test_batches_keep_a_host_days_files_together() -> None:
    files = [
        SampleFile(f"{host_day(host)}/{n}.parquet", 1, 1) for host in ("a", "b") for n in range(3)
    ]
    batches = plan_batches(files, max_files=4)
    assert [[f.path.split("/")[3] for f in batch] for batch in batches] == [
        ["host=a"] * 3,
        ["host=b"] * 3,
    ]
