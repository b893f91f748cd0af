"""Samples of compacted, built host-days leave the warehouse file for the lake
(warehouse/lake/samples.py), and nothing a user or a build reads changes: the same samples,
the same marts."""

from __future__ import annotations

import datetime as dt
import logging
import random
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.simulate.fleet import (
    SimulationSpec,
    scenario_for,
    simulate_window,
    write_reference_files,
)
from gpufleet.warehouse.build import build
from gpufleet.warehouse.build import full as full_module
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.lake.ranges import ranges_of, uuid_ranges
from gpufleet.warehouse.lake.samples import evicted_files
from gpufleet.warehouse.publish import connect_read_only
from gpufleet.warehouse.publish import slots as warehouse
from tests.templates import made_once
from tests.test_incremental import MARTS, assert_same_rows, mart_table

pytestmark = pytest.mark.fleet

DAY1 = dt.datetime(2026, 11, 16, tzinfo=dt.UTC)
DAY2 = DAY1 + dt.timedelta(days=1)
# samples every 30 s, not 10: a third of the rows to load, build and compare; a file per
# host every 30 minutes, not 10: a third of the files to write, load and compact
SPEC = SimulationSpec(
    gpus=16,
    start=DAY1,
    end=DAY2 + dt.timedelta(days=1),
    interval_s=30.0,
    flush_s=1800.0,
    seed=11,
)


def _arrive(config: Config, start: dt.datetime, end: dt.datetime, today: dt.datetime) -> Any:
    """The collectors' files from `start` to `end`, then a cycle: ingest (compacting the
    loaded days before `today`) and build."""
    simulate_window(SPEC, data_dir=config.data_dir, start=start, end=end, scenario=_SCENARIO)
    ingest(config, today=today.date())
    return build(config)


_SCENARIO = scenario_for(SPEC)
_COMPARED = (*MARTS, "samples")


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return con.execute(sql).fetchall()


def _tables(con: duckdb.DuckDBPyConnection) -> dict[str, pa.Table]:
    """The marts and the samples, each as one table (tests/test_incremental.mart_table)."""
    return {name: mart_table(con, name) for name in _COMPARED}


def _assert_holds(con: duckdb.DuckDBPyConnection, expected: dict[str, pa.Table]) -> None:
    for name, rows in expected.items():
        assert_same_rows(mart_table(con, name), rows, name)


def _lake_dir(config: Config, day: dt.datetime) -> list[Path]:
    return sorted(config.samples_dir.glob(f"date={day.date()}/host=*/compacted-*.parquet"))


@pytest.fixture(scope="module")
def evicted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Config, list[Any], int]:
    """Day 1 in two cycles, then day 2 in two: the first cycle of day 2 compacts day 1
    and its build moves day 1's samples to the lake; the second reads day 1's last
    samples (the context of its first new ones) from there."""
    config = Config(data_dir=tmp_path_factory.mktemp("lake"))
    write_reference_files(_SCENARIO, SPEC, config.data_dir)
    noon = dt.timedelta(hours=12)
    results = [_arrive(config, DAY1, DAY1 + noon, today=DAY1)]
    results.append(_arrive(config, DAY1 + noon, DAY2, today=DAY1))
    with connect_read_only(config) as con:
        day1 = _rows(con, f"select count(*) from samples where ts <= '{DAY2.isoformat()}'")[0][0]
    results.append(_arrive(config, DAY2, DAY2 + dt.timedelta(hours=6), today=DAY2))
    results.append(_arrive(config, DAY2 + dt.timedelta(hours=6), DAY2 + noon, today=DAY2))
    return config, results, day1


def _loaded_at_once(config: Config, to: Path) -> Config:
    """config's raw and ref files loaded into a new warehouse in `to` and built at once,
    kept there whole: no lake."""
    plain = Config(data_dir=to)
    shutil.copytree(config.data_dir / "raw", plain.data_dir / "raw")
    shutil.copytree(config.data_dir / "ref", plain.data_dir / "ref")
    for compacted in plain.samples_dir.glob("*/*/compacted-*.parquet"):
        compacted.rename(compacted.with_name("day.parquet"))  # a file like any other
    ingest(plain, compact=False)
    result = build(plain)
    assert (result.mode, result.evicted) == ("full", 0)
    return plain


@pytest.fixture(scope="module")
def everything(
    evicted: tuple[Config, list[Any], int], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, pa.Table]:
    """The marts and samples of `evicted`'s files (day 1 and day 2's morning) loaded into a
    warehouse that keeps them all, and built at once."""
    config, _, _ = evicted
    plain = _loaded_at_once(config, tmp_path_factory.mktemp("plain"))
    with connect_read_only(plain) as con:
        assert _rows(con, "select count(*) from build_state.lake_files") == [(0,)]
        return _tables(con)


def test_a_built_compacted_day_leaves_the_warehouse_file(
    evicted: tuple[Config, list[Any], int],
) -> None:
    config, results, day1 = evicted
    assert [r.mode for r in results] == ["full", "incremental", "incremental", "incremental"]
    assert [r.evicted for r in results] == [0, 0, day1, 0]
    with connect_read_only(config) as con:
        stored_day1 = _rows(con, f"select count(*) from samples_stored where ts < '{DAY2}'")
        lake = _rows(con, "select path, day, row_count from build_state.lake_files order by 1")
        in_view = _rows(con, f"select count(*) from samples where ts < '{DAY2}'")
    assert stored_day1 == [(0,)]
    files = _lake_dir(config, DAY1)
    assert len(files) == 2  # 16 GPUs, 8 per host
    assert [(path, day) for path, day, _ in lake] == [
        (file.relative_to(config.data_dir).as_posix(), DAY1.date()) for file in files
    ]
    assert sum(rows for _, _, rows in lake) == in_view[0][0] > 0


def test_the_lake_and_the_warehouse_equal_one_warehouse_of_everything(
    evicted: tuple[Config, list[Any], int], everything: dict[str, pa.Table]
) -> None:
    """Incremental builds over the lake, and a full build reading it, equal a full build
    of the same files loaded into a warehouse that keeps them all."""
    config, _, _ = evicted
    with connect_read_only(config) as con:
        _assert_holds(con, everything)
    rebuilt = build(config, full=True)
    assert rebuilt.mode == "full"
    with connect_read_only(config) as con:
        _assert_holds(con, everything)
        # the view still carries the contract's column comments after the lake changed it
        comments = _rows(
            con,
            "select count(*) from duckdb_columns()"
            " where table_name = 'samples' and comment is null",
        )
    assert comments == [(0,)]


def test_a_full_build_in_slices_reads_each_slices_gpus_from_their_hosts_lake_files(
    evicted: tuple[Config, list[Any], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice of the GPUs names only the lake files that hold them (a GPU's: its host's),
    and a full build in such slices equals the build before it."""
    config, _, _ = evicted
    with connect_read_only(config) as con:
        expected = _tables(con)
        files = evicted_files(con, config)
        ranges = uuid_ranges(con, files)
    assert len(files) == 2  # day 1 of two hosts
    for path in files:
        for uuid in pq.read_table(path, columns=["gpu_uuid"]).column(0).unique().to_pylist():
            assert list(ranges.holding(uuid, uuid)) == [path]
    monkeypatch.setattr(full_module, "FULL_BUILD_CHUNK_SAMPLES", 20_000)  # 4 slices
    assert build(config, full=True).mode == "full"
    with connect_read_only(config) as con:
        _assert_holds(con, expected)


def test_the_files_holding_a_range_are_those_a_pass_over_every_row_group_finds() -> None:
    """The lookup (sorted row groups) against the plain rule, on overlapping, wide and
    narrow ranges, files of several row groups, ones without statistics or footer rows."""
    pick = random.Random(42)
    uuids = [f"GPU-{n:04d}" for n in range(200)]
    rows: list[tuple[str, str | None, str | None]] = []
    for n in range(300):
        for _ in range(pick.choice((1, 1, 2, 3))):
            first_n = pick.randrange(200)
            last_n = min(199, first_n + pick.choice((0, 3, 7, 40, 150)))
            rows.append((f"f{n}", uuids[first_n], uuids[last_n]))
    rows += [("f300", None, None), ("f301", "GPU-0001", None), ("f301", "GPU-0001", "GPU-0002")]
    files = {f"f{n}": n for n in range(303)}  # f302: no row group listed (any GPU)
    ranges = ranges_of(files, rows)
    for _ in range(500):
        first, last = sorted(pick.sample(uuids, 2)) if pick.random() < 0.8 else [uuids[0]] * 2
        spans: dict[str, list[tuple[str | None, str | None]]] = {}
        for path, low, high in rows:
            spans.setdefault(path, []).append((low, high))
        expected = {
            path: held
            for path, held in files.items()
            if path not in spans
            or any(low is None or high is None for low, high in spans[path])
            or any(low <= last and first <= high for low, high in spans[path])  # type: ignore[operator]
        }
        assert ranges.holding(first, last) == expected
    assert ranges_of({}, []).holding("a", "z") == {}


def test_a_reader_of_the_publish_before_still_reads_every_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """...and the publish after is a file without the evicted rows' blocks."""
    # these files are small, and their many small tables take a block each
    monkeypatch.setattr(warehouse, "_REWRITE_FREE_BYTES", 0)
    monkeypatch.setattr(warehouse, "_REWRITE_FREE_PER_USED", 0.25)
    config = Config(data_dir=tmp_path)
    write_reference_files(_SCENARIO, SPEC, config.data_dir)
    _arrive(config, DAY1, DAY1 + dt.timedelta(hours=3), today=DAY1)
    with connect_read_only(config) as before:
        count = _rows(before, "select count(*), sum(energy_mj) from samples")
        result = _arrive(config, DAY1 + dt.timedelta(hours=3), DAY1 + dt.timedelta(hours=4), DAY2)
        assert result.evicted > 0
        assert _rows(before, "select count(*), sum(energy_mj) from samples") == count
    with connect_read_only(config) as after:
        assert _rows(after, "select count(*) from samples_stored") == [(0,)]
        assert _rows(after, "select count(*) from samples")[0][0] == result.evicted
        used, free = _rows(after, "select used_blocks, free_blocks from pragma_database_size()")[0]
        kept = _rows(
            after, "select count(*) from duckdb_constraints() where constraint_type = 'PRIMARY KEY'"
        )
        described = _rows(after, "select comment from duckdb_views() where view_name = 'samples'")
    assert free == 0 < used  # written afresh: the evicted rows' blocks are gone
    assert kept[0][0] >= 2 and described[0][0]  # loaded_files' and lake_files' keys; comments


def _backfilled(tmp_path: Path) -> Config:
    """Day 1's first two hours arriving on day 2 (a backfill), ingested and built: made
    once per test process and copied (tests/templates.py). The copy's `samples` view names
    the files of the first until a build of the copy makes it anew."""
    made_once("test_lake._backfilled", _backfill, tmp_path)
    return Config(data_dir=tmp_path)


def _backfill(data_dir: Path) -> None:
    config = Config(data_dir=data_dir)
    write_reference_files(_SCENARIO, SPEC, config.data_dir)
    _arrive(config, DAY1, DAY1 + dt.timedelta(hours=2), today=DAY2)


def test_a_late_file_for_a_day_in_the_lake_loads_once_and_leaves_the_lake_file_alone(
    tmp_path: Path,
) -> None:
    config = _backfilled(tmp_path)
    (lake_file,) = _lake_dir(config, DAY1)[:1]
    before = lake_file.stat()
    late = pq.read_table(lake_file).slice(0, 2)
    # one sample the lake holds already, one it does not (a GPU it has not seen)
    uuid = late.column("gpu_uuid").to_pylist()
    late = late.set_column(
        late.schema.get_field_index("gpu_uuid"),
        "gpu_uuid",
        pc.if_else(pc.equal(late.column("ts"), late.column("ts")[0]), uuid[0], "GPU-late"),
    )
    assert late.column("gpu_uuid").to_pylist() == [uuid[0], "GPU-late"]
    pq.write_table(late, lake_file.with_name("late.parquet"))
    with connect_read_only(config) as con:
        total = _rows(con, "select count(*) from samples")[0][0]

    loaded = ingest(config, today=DAY2.date() + dt.timedelta(days=1))
    result = build(config)

    assert (loaded.samples_loaded, loaded.duplicates_skipped) == (1, 1)
    assert result.evicted == 0
    assert sorted(p.name for p in lake_file.parent.iterdir()) == [lake_file.name, "late.parquet"]
    assert (lake_file.stat().st_size, lake_file.stat().st_mtime_ns) == (
        before.st_size,
        before.st_mtime_ns,
    )
    with connect_read_only(config) as con:
        assert _rows(con, "select count(*) from samples")[0][0] == total + 1
        assert _rows(con, "select gpu_uuid from samples_stored") == [("GPU-late",)]
        assert _rows(con, "select count(*) from samples_attributed") == [(total + 1,)]


def _compacted_unbuilt(tmp_path: Path) -> Config:
    """Day 1's first hour in two ingests, the second on day 2, and no build yet: made once
    per test process and copied (tests/templates.py)."""
    made_once("test_lake._compacted_unbuilt", _compact_unbuilt, tmp_path)
    return Config(data_dir=tmp_path)


def _compact_unbuilt(data_dir: Path) -> None:
    config = Config(data_dir=data_dir)
    write_reference_files(_SCENARIO, SPEC, config.data_dir)
    # The day arrives in two ingests, as a live one does: compaction reads its files and a
    # build checks them before they join the lake (a backfill's go there at once).
    half = DAY1 + dt.timedelta(minutes=30)
    simulate_window(SPEC, data_dir=config.data_dir, start=DAY1, end=half, scenario=_SCENARIO)
    ingest(config, today=DAY1.date())
    end = DAY1 + dt.timedelta(hours=1)
    simulate_window(SPEC, data_dir=config.data_dir, start=half, end=end, scenario=_SCENARIO)
    ingest(config, today=DAY2.date())


def test_a_compacted_file_that_differs_from_the_warehouse_stays_out_of_the_lake(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _compacted_unbuilt(tmp_path)
    changed, unchanged = _lake_dir(config, DAY1)
    table = pq.read_table(changed)
    power = table.column("power_w").to_pylist()
    power[5] = (power[5] or 0.0) + 1.0
    index = table.schema.get_field_index("power_w")
    field = table.schema.field(index)
    pq.write_table(table.set_column(index, field, pa.array(power, field.type)), changed)

    with caplog.at_level(logging.WARNING, logger="gpufleet.lake"):
        result = build(config)

    assert result.evicted == pq.read_metadata(unchanged).num_rows
    [line] = [r.getMessage() for r in caplog.records if "in the warehouse" in r.getMessage()]
    assert line.startswith("lake: 1 compacted file stays in the warehouse, 1 samples differing")
    assert f"({changed.relative_to(config.data_dir).as_posix()}: 1 of its " in line
    with connect_read_only(config) as con:
        lake = _rows(con, "select path from build_state.lake_files")
        stored = _rows(con, "select count(*) from samples_stored")
    assert lake == [(unchanged.relative_to(config.data_dir).as_posix(),)]
    assert stored == [(pq.read_metadata(changed).num_rows,)]


def test_compacted_files_changed_by_hand_are_named_in_one_line_a_build(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _compacted_unbuilt(tmp_path)
    for changed in _lake_dir(config, DAY1):
        table = pq.read_table(changed)
        index = table.schema.get_field_index("power_w")
        power = [(value or 0.0) + 1.0 for value in table.column(index).to_pylist()]
        field = table.schema.field(index)
        pq.write_table(table.set_column(index, field, pa.array(power, field.type)), changed)

    with caplog.at_level(logging.WARNING, logger="gpufleet.lake"):
        assert build(config).evicted == 0
    lines = [r.getMessage() for r in caplog.records if "in the warehouse" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("lake: 2 compacted files stay in the warehouse")


def test_a_missing_lake_file_stops_a_build_with_its_name(tmp_path: Path) -> None:
    config = _backfilled(tmp_path)
    with connect_read_only(config) as con:
        lake = _rows(con, "select count(*) from build_state.lake_files where load_id > 0")
    assert lake == [(2,)]  # straight from the ingest: 16 GPUs on 2 hosts
    gone = _lake_dir(config, DAY1)[0]
    gone.unlink()
    with pytest.raises(GpufleetError, match=f"{re.escape(str(gone))}: this compacted file"):
        build(config, full=True)


def test_a_whole_day_arriving_late_goes_straight_to_the_lake_and_builds_incrementally(
    tmp_path: Path, everything: dict[str, pa.Table]
) -> None:
    """Day 2's morning is built first; then all of day 1 arrives (a host's backfill): the
    ingest writes day 1 compacted from the rows it loads, straight into the lake, and the
    next build takes its samples as new. The marts equal a warehouse of everything (the
    same samples as `evicted`'s, which arrived in another order)."""
    config = Config(data_dir=tmp_path / "lake")
    write_reference_files(_SCENARIO, SPEC, config.data_dir)
    first = _arrive(config, DAY2, DAY2 + dt.timedelta(hours=12), today=DAY2)
    late = _arrive(config, DAY1, DAY2, today=DAY2)

    assert (first.mode, late.mode, late.evicted) == ("full", "incremental", 0)
    with connect_read_only(config) as con:
        lake = _rows(con, "select count(*), sum(row_count) from build_state.lake_files")
        stored = _rows(con, f"select count(*) from samples_stored where ts < '{DAY2}'")
        in_view = _rows(con, f"select count(*) from samples where ts < '{DAY2}'")
        _assert_holds(con, everything)
    assert stored == [(0,)] and lake == [(2, in_view[0][0])] and in_view[0][0] > 0
