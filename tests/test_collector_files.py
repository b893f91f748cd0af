"""Sample files match docs/reference.md#sample-files; the spool survives kills and full disks."""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpufleet.collectors.writer
from gpufleet.collectors.collect import Collector
from gpufleet.collectors.schema import COLLECTOR_SCHEMA, SAMPLE_SCHEMA, V1_2_FIELDS
from gpufleet.collectors.spool import Spool, read_segment
from gpufleet.collectors.writer import safe_host
from tests.fake_nvml import ManualClock, fleet_scenario, install_fake

MIDNIGHT = dt.datetime(2026, 11, 18, tzinfo=dt.UTC).timestamp()


def make_collector(tmp_path, mono, wall, *, host="node-1", flush_s=600.0):
    return Collector(
        data_dir=tmp_path,
        interval_s=10.0,
        flush_s=flush_s,
        host=host,
        wall_clock=wall,
        monotonic=mono,
        stderr=io.StringIO(),
        fsync=False,
    )


def tick(collector, mono, wall, seconds=10.0):
    mono.advance(seconds)
    wall.advance(seconds)
    return collector.tick()


def sample_files(tmp_path):
    return sorted((tmp_path / "raw" / "samples").rglob("*.parquet"))


def visible_entries(tmp_path):
    """Everything under raw/samples, temporary names included."""
    return sorted(p.name for p in (tmp_path / "raw" / "samples").rglob("*") if p.is_file())


def test_files_match_the_contract(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    fake = install_fake(monkeypatch, fleet_scenario(3), clock_us=mono.us)
    fake.gpus[2]["uuid"] = "GPU-0-sorts-first"
    collector = make_collector(tmp_path, mono, wall, host="gpu node/7")
    collector.start()
    for _ in range(4):
        tick(collector, mono, wall)
    assert collector.close()

    [path] = sample_files(tmp_path)
    assert path.parent.name == "host=gpu_node_7"  # sanitized for the path
    assert path.parent.parent.name == "date=2026-11-18"
    parquet = pq.ParquetFile(path)
    table = parquet.read()
    # the contract's columns first, in order, then those of v1.2
    assert table.schema.names[: len(SAMPLE_SCHEMA)] == SAMPLE_SCHEMA.names
    assert table.schema.names == COLLECTOR_SCHEMA.names
    for field in COLLECTOR_SCHEMA:
        assert table.schema.field(field.name).type == field.type, field.name
    metadata = table.schema.metadata
    assert metadata[b"gpufleet.schema_version"] == b"1"
    assert b"gpufleet.collector_version" in metadata
    columns = parquet.metadata.row_group(0)
    assert {columns.column(i).compression for i in range(columns.num_columns)} == {"ZSTD"}
    rows = table.to_pylist()
    assert len(rows) == 12
    keys = [(r["gpu_uuid"], r["ts"]) for r in rows]
    assert keys == sorted(keys) and keys[0][0] == "GPU-0-sorts-first"
    assert {r["host"] for r in rows} == {"gpu node/7"}  # the column keeps the real name
    assert rows[0]["interval_s"] == pytest.approx(10.0)
    assert rows[0]["processes"][0]["pid"] == 4242
    assert not list(collector.spool.directory.glob("*.jsonl"))


def test_safe_host():
    assert safe_host("node-1.cluster") == "node-1.cluster"
    assert safe_host("../etc") == "etc"
    assert safe_host("a/b c=d") == "a_b_c_d"
    assert safe_host("...") == "unknown"


def test_flush_period_makes_a_file_without_waiting_for_shutdown(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall, flush_s=60.0)
    collector.start()
    for _ in range(5):
        tick(collector, mono, wall)
    assert sample_files(tmp_path) == []
    tick(collector, mono, wall)  # 60 s
    [first] = sample_files(tmp_path)
    assert pq.read_table(first).num_rows == 12
    for _ in range(6):
        tick(collector, mono, wall)
    assert len(sample_files(tmp_path)) == 2


def test_utc_midnight_closes_the_file_and_starts_the_next_date(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT - 25)
    install_fake(monkeypatch, fleet_scenario(1), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    tick(collector, mono, wall)  # 23:59:45
    tick(collector, mono, wall)  # 23:59:55
    assert sample_files(tmp_path) == []
    tick(collector, mono, wall)  # 00:00:05: yesterday's file is written now
    [yesterday] = sample_files(tmp_path)
    assert yesterday.parent.parent.name == "date=2026-11-17"
    assert pq.read_table(yesterday).num_rows == 2
    collector.close()
    files = sample_files(tmp_path)
    assert [f.parent.parent.name for f in files] == ["date=2026-11-17", "date=2026-11-18"]
    assert pq.read_table(files[1]).num_rows == 1


def test_a_restart_converts_the_leftover_spool_and_tolerates_a_torn_tick(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    first = make_collector(tmp_path, mono, wall)
    first.start()
    for _ in range(3):
        tick(first, mono, wall)
    segment = first.spool.open_segment
    assert segment is not None
    # kill -9 in the middle of the fourth tick: half a line, no newline.
    with segment.open("ab") as f:
        f.write(b'[{"ts": 1795000000000000, "interval_s": 10.0, "host": "no')
    # (The killed process never closes or flushes anything.)

    second = make_collector(tmp_path, mono, wall)
    second.start()  # converts the leftover first
    [recovered] = sample_files(tmp_path)
    table = pq.read_table(recovered)
    assert table.num_rows == 6  # three complete ticks of two GPUs
    assert not segment.exists()
    tick(second, mono, wall)
    second.close()
    assert len(sample_files(tmp_path)) == 2


def test_read_segment_skips_garbage_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    good = [{"ts": 1, "gpu_uuid": "a"}]
    path.write_text(json.dumps(good) + "\n" + "not json\n" + json.dumps(good) + "\n[{")
    assert read_segment(path) == good + good


def test_unwritable_output_keeps_the_spool_and_retries(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall, flush_s=30.0)
    collector.start()
    # A regular file where the date directory must go: mkdir fails, even for root.
    samples = tmp_path / "raw" / "samples"
    samples.mkdir(parents=True)
    (samples / "date=2026-11-18").write_text("in the way")
    for _ in range(3):
        tick(collector, mono, wall)  # the flush at 30 s fails
    errors = collector._stderr.getvalue()
    assert errors.count("gpufleet: error: cannot write") == 1
    assert "the spool in" in errors and "is kept" in errors and "Traceback" not in errors
    assert len(list(collector.spool.directory.glob("*.jsonl"))) == 1  # kept
    assert sample_files(tmp_path) == []

    (samples / "date=2026-11-18").unlink()  # an operator frees the path
    for _ in range(3):
        tick(collector, mono, wall)  # retried after min(flush, 60 s) = 30 s
    # The kept segment (3 ticks) and the one spooled since (3 ticks): none lost.
    assert sum(pq.read_table(f).num_rows for f in sample_files(tmp_path)) == 12
    assert collector.close()
    assert sum(pq.read_table(f).num_rows for f in sample_files(tmp_path)) == 12
    assert "being written again" in collector._stderr.getvalue()


def test_disk_full_mid_write_never_shows_a_partial_file(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    tick(collector, mono, wall)
    real_write = pq.write_table

    def full_disk(table, where, **kwargs):
        real_write(table.slice(0, 1), where, **kwargs)  # something reached the disk...
        raise OSError(28, "No space left on device")  # ...then ENOSPC

    monkeypatch.setattr(gpufleet.collectors.writer.pq, "write_table", full_disk)
    assert collector.flush() is False
    assert "No space left on device" in collector._stderr.getvalue()
    assert visible_entries(tmp_path) == []  # not even the temporary file
    assert len(collector.spool.closed_segments()) == 1
    monkeypatch.setattr(gpufleet.collectors.writer.pq, "write_table", real_write)
    assert collector.close() is True
    [path] = sample_files(tmp_path)
    assert pq.read_table(path).num_rows == 2


def test_spool_append_failure_keeps_ticks_in_memory(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    install_fake(monkeypatch, fleet_scenario(1), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    real_append = Spool.append
    failing = {"on": True}

    def append(self, records, **kwargs):
        if failing["on"]:
            raise OSError(28, "No space left on device")
        return real_append(self, records, **kwargs)

    monkeypatch.setattr(Spool, "append", append)
    tick(collector, mono, wall)
    tick(collector, mono, wall)
    assert collector._stderr.getvalue().count("cannot append to the spool") == 1
    failing["on"] = False
    tick(collector, mono, wall)
    assert collector.close()
    [path] = sample_files(tmp_path)
    assert pq.read_table(path).num_rows == 3


def test_spool_lines_round_trip_to_the_arrow_types(tmp_path):
    spool = Spool(directory=tmp_path / "spool", fsync=False)
    record: dict[str, Any] = {name: None for name in SAMPLE_SCHEMA.names}
    record.update(
        ts=1_795_000_000_123_456,
        interval_s=10.0,
        host="h",
        gpu_index=3,
        gpu_uuid="GPU-x",
        status="ok",
        clock_event_mask=2**63 + 0x40,  # uint64 beyond int64
        processes=[{"pid": 1, "user": "ann", "used_mem_bytes": None, "job_id": "7"}],
    )
    spool.append([record], stamp="s", date_iso="2026-11-17")
    spool.rotate()
    [segment] = spool.closed_segments()
    table = gpufleet.collectors.writer.records_to_table(read_segment(segment))
    row = table.to_pylist()[0]
    assert row["clock_event_mask"] == 2**63 + 0x40
    # a record spooled by an older collector, without the v1.2 keys: those columns are null
    assert {field.name: row[field.name] for field in V1_2_FIELDS} == dict.fromkeys(
        field.name for field in V1_2_FIELDS
    )
    assert row["ts"] == dt.datetime(2026, 11, 18, 11, 6, 40, 123456, tzinfo=dt.UTC)
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_a_spool_segment_that_does_not_fit_the_schema_is_set_aside(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    install_fake(monkeypatch, fleet_scenario(1), clock_us=mono.us)
    spool_dir = tmp_path / "raw" / ".spool" / "host=node-1"
    spool_dir.mkdir(parents=True)
    (spool_dir / "20261118T000000000000Z-0000.jsonl").write_text('[{"ts": "yesterday"}]\n')
    collector = make_collector(tmp_path, mono, wall)
    collector.start()  # neither a crash nor a retry loop
    assert "set aside" in collector._stderr.getvalue()
    assert [p.suffix for p in spool_dir.iterdir()] == [".bad"]
    tick(collector, mono, wall)
    assert collector.close()
    assert len(sample_files(tmp_path)) == 1


def test_ticks_held_in_memory_are_spooled_at_shutdown(monkeypatch, tmp_path):
    mono, wall = ManualClock(), ManualClock(MIDNIGHT + 3600)
    install_fake(monkeypatch, fleet_scenario(1), clock_us=mono.us)
    collector = make_collector(tmp_path, mono, wall)
    collector.start()
    real_append = Spool.append
    calls = {"n": 0}

    def append_fails_once(self, records, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return real_append(self, records, **kwargs)

    monkeypatch.setattr(Spool, "append", append_fails_once)
    tick(collector, mono, wall)  # refused: held in memory
    assert collector.close()  # the shutdown spools it, then writes it
    [path] = sample_files(tmp_path)
    assert pq.read_table(path).num_rows == 1


def test_columns_of_nulls_are_written_plain_and_uncompressed(tmp_path) -> None:
    """`plain_nulls`: a column holding only nulls gets neither a dictionary nor zstd (nothing
    for them to work on; they cost a small file of many such columns a third of its CPU);
    the other columns are written as before, and every value reads back the same."""
    table = pa.table(
        {
            "host": pa.array(["a", "a", "b"]),
            "power_w": pa.array([None, None, None], pa.float32()),
            "xid_errors": pa.array([None, None, None], pa.list_(pa.int32())),
            "energy_mj": pa.array([1.0, None, 3.0]),
        }
    ).replace_schema_metadata({"k": "v"})
    target = tmp_path / "x.parquet"
    gpufleet.collectors.writer.write_table_atomically(table, target, plain_nulls=True)
    back = pq.read_table(target)
    assert back.equals(table) and back.schema.metadata == table.schema.metadata
    group = pq.ParquetFile(target).metadata.row_group(0)
    chunks = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    for path in ("power_w", "xid_errors.list.element"):
        assert chunks[path].compression == "UNCOMPRESSED", path
        assert not chunks[path].has_dictionary_page, path
    for path in ("host", "energy_mj"):
        assert chunks[path].compression == "ZSTD", path
        assert chunks[path].has_dictionary_page, path
