"""Values outside their valid ranges (docs/reference.md#valid-values): NaN, infinities,
absurd numbers, times far from the file's day, before [ingest] earliest or in the future
quarantine the file, naming the column and the value, whichever way its batch is read; the
edges of each range load."""

from __future__ import annotations

import datetime as dt
import math
import re
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pytest

from gpufleet.collectors.schema import SAMPLE_SCHEMA
from gpufleet.config import Config, IngestConfig
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import (
    IngestResult,
    QuarantineWarning,
    cut,
    find_sample_files,
    ingest,
)
from gpufleet.warehouse.ingest.fanned import LoadTask, run_load_task
from gpufleet.warehouse.ingest.values import VALUE_RANGES, range_text, time_limits
from tests.test_ingest import (
    DAY1,
    count,
    query,
    read_by_duckdb,
    sample,
    write_samples,
    write_table,
)

pytestmark = pytest.mark.fleet

NAN, INF = math.nan, math.inf

# (column, value, what the reason says about the value)
OUT_OF_RANGE = [
    ("gpu_util_pct", NAN, "nan"),
    ("gpu_util_pct", INF, "inf"),
    ("gpu_util_pct", -INF, "-inf"),
    ("gpu_util_pct", -5.0, "-5.0"),
    ("gpu_util_pct", 150.0, "150.0"),
    ("gpu_util_pct", 1e30, "1e+30"),
    ("mem_util_pct", 100.5, "100.5"),
    ("interval_s", 0.0, "0.0"),
    ("interval_s", -10.0, "-10.0"),
    ("interval_s", 86401.0, "86401.0"),
    ("interval_s", NAN, "nan"),
    ("power_w", -1.0, "-1.0"),
    ("power_w", 1e9, "1e+09"),
    ("power_limit_w", INF, "inf"),
    ("temp_gpu_c", -51, "-51"),
    ("temp_gpu_c", 201, "201"),
    ("temp_mem_c", 999, "999"),
    ("mem_used_bytes", -1, "-1"),
    ("mem_total_bytes", -(1 << 40), str(-(1 << 40))),
    ("energy_mj", -5, "-5"),
    ("sm_clock_mhz", -1, "-1"),
    ("thermal_violation_ns", -1, "-1"),
    ("power_violation_ns", -7, "-7"),
    ("sm_active_pct", 100.5, "100.5"),
    ("sm_occupancy_pct", -1.0, "-1.0"),
    ("tensor_active_pct", NAN, "nan"),
    ("dram_active_pct", 101.0, "101.0"),
    ("pcie_rx_bytes_s", -1.0, "-1.0"),
    ("pcie_tx_bytes_s", NAN, "nan"),
    ("nvlink_rx_bytes_s", INF, "inf"),
    ("nvlink_tx_bytes_s", -0.5, "-0.5"),
    ("ecc_uncorrected_volatile", -1, "-1"),
    ("ecc_corrected_volatile", -2, "-2"),
    ("pcie_replay_count", -3, "-3"),
    ("mig_slice_fraction", 0.0, "0.0"),
    ("mig_slice_fraction", 1.5, "1.5"),
    ("mig_slice_fraction", -0.25, "-0.25"),
]
EDGES = [
    ("gpu_util_pct", 0.0),
    ("gpu_util_pct", 100.0),
    ("interval_s", 86400.0),
    ("interval_s", 0.001),
    ("power_w", 0.0),
    ("power_w", 5000.0),
    ("temp_gpu_c", -50),
    ("temp_gpu_c", 200),
    ("mem_used_bytes", 0),
    ("gpu_util_pct", None),  # NULL stays allowed in a nullable column
    ("sm_active_pct", 0.0),
    ("tensor_active_pct", 100.0),
    ("pcie_rx_bytes_s", 0.0),
    ("nvlink_tx_bytes_s", 9e11),
    ("ecc_uncorrected_volatile", 0),
    ("mig_slice_fraction", 1.0),
    ("mig_slice_fraction", 1 / 7),
    ("xid_errors", []),
    ("xid_errors", [79, 48]),
]


def _ingest_expecting(config: Config, bad: str) -> Any:
    with pytest.warns(QuarantineWarning):
        result = ingest(config, compact=False)
    assert [q.path for q in result.quarantined] == [bad]
    return result


class Shared(NamedTuple):
    """One ingest of the cases of a parametrized test, each in a host folder of its own
    with a GPU of its own (`_case`): each case asserts on its own files, and an ingest each
    cost more than the rest of the test."""

    config: Config
    result: IngestResult
    warned: list[str]  # the QuarantineWarnings' messages


def _case(number: int) -> tuple[str, str]:
    """Case `number`'s host folder and GPU."""
    return f"raw/samples/date=2026-11-16/host=case{number:02d}", f"GPU-case{number:02d}"


def _shared_ingest(config: Config) -> Shared:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = ingest(config, compact=False)
    warned = [str(w.message) for w in caught if issubclass(w.category, QuarantineWarning)]
    return Shared(config, result, warned)


@pytest.fixture(scope="module")
def out_of_range(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """Each case of OUT_OF_RANGE as a file b.parquet with the value in its second row,
    between two good files a.parquet and c.parquet, all ingested at once."""
    config = Config(data_dir=tmp_path_factory.mktemp("out-of-range") / "data")
    for number, (column, value, _) in enumerate(OUT_OF_RANGE):
        folder, gpu = _case(number)
        write_samples(config.data_dir, f"{folder}/a.parquet", [sample(0, gpu=gpu)])
        rows = [sample(10, gpu=gpu), {**sample(20, gpu=gpu), column: value}]
        write_samples(config.data_dir, f"{folder}/b.parquet", rows)
        write_samples(config.data_dir, f"{folder}/c.parquet", [sample(30, gpu=gpu)])
    return _shared_ingest(config)


@pytest.mark.parametrize(("column", "value", "shown"), OUT_OF_RANGE)
def test_a_value_out_of_range_quarantines_its_file(
    out_of_range: Shared, column: str, value: float, shown: str
) -> None:
    number = next(n for n, case in enumerate(OUT_OF_RANGE) if case[::2] == (column, shown))
    folder, gpu = _case(number)
    config, result, warned = out_of_range
    bad = f"{folder}/b.parquet"
    rule = range_text(next(r for r in VALUE_RANGES if r.column == column))
    reason = f"column {column}: value {shown} is out of range ({rule})"
    assert [(q.path, q.reason) for q in result.quarantined if q.path.startswith(f"{folder}/")] == [
        (bad, reason)
    ]
    assert [message for message in warned if bad in message]
    assert result.batches_read_by_duckdb == 0  # polars read it all
    seconds = f"select epoch(ts)::int % 100 from samples where gpu_uuid = '{gpu}' order by ts"
    assert query(config, seconds) == [(0,), (30,)]


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    """Each case of EDGES as a file of one sample with the value, all ingested at once."""
    config = Config(data_dir=tmp_path_factory.mktemp("edges") / "data")
    for number, (column, value) in enumerate(EDGES):
        folder, gpu = _case(number)
        write_samples(
            config.data_dir, f"{folder}/a.parquet", [{**sample(0, gpu=gpu), column: value}]
        )
    return _shared_ingest(config)


@pytest.mark.parametrize(("column", "value"), EDGES)
def test_the_edges_of_each_range_load(edges: Shared, column: str, value: float | None) -> None:
    number = EDGES.index((column, value))
    folder, gpu = _case(number)
    config, result, warned = edges
    assert not [q for q in result.quarantined if q.path.startswith(f"{folder}/")]
    assert not [message for message in warned if f"{folder}/" in message]
    loaded = query(config, f"select row_count from loaded_files where path = '{folder}/a.parquet'")
    assert loaded == [(1,)]
    assert query(config, f"select count(*) from samples where gpu_uuid = '{gpu}'") == [(1,)]


@pytest.mark.parametrize(
    "when",
    [
        dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2100, 1, 1, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 14, 23, 59, 59, tzinfo=dt.UTC),  # the folder's day - 1 day - 1 s
        dt.datetime(2026, 11, 18, 0, 0, 0, tzinfo=dt.UTC),  # the folder's day + 2 days
    ],
    ids=["1970", "2100", "before", "after"],
)
def test_a_time_far_from_its_folders_day_quarantines_the_file(
    config: Config, when: dt.datetime
) -> None:
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(10), {**sample(20), "ts": when}])
    result = _ingest_expecting(config, f"{DAY1}/b.parquet")
    assert result.quarantined[0].reason == (
        f"column ts: value {when:%Y-%m-%d %H:%M:%S} UTC is out of range "
        "(2026-11-15 to 2026-11-17: the day of its folder date=2026-11-16, 1 day either side)"
    )
    assert count(config) == 1


def test_clock_skew_of_up_to_a_day_either_side_loads(config: Config) -> None:
    rows = [
        {**sample(0), "ts": dt.datetime(2026, 11, 15, 0, 0, tzinfo=dt.UTC)},
        {**sample(0), "ts": dt.datetime(2026, 11, 17, 23, 59, 59, 999999, tzinfo=dt.UTC)},
    ]
    write_samples(config.data_dir, f"{DAY1}/a.parquet", rows)
    result = ingest(config, compact=False)
    assert (result.samples_loaded, result.quarantined) == (2, ())


def test_files_read_by_duckdb_are_quarantined_for_the_same_values_with_the_same_reasons(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files polars does not read (DuckDB reads them), in a batch whose rows repeat a key:
    the same rules, with the same reasons."""
    read_by_duckdb(monkeypatch)
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(10), sample(20)])  # repeats 10
    bad = [{**sample(30), "interval_s": NAN}, {**sample(40), "gpu_util_pct": 150.0}]
    write_samples(config.data_dir, f"{DAY1}/c.parquet", bad)
    write_samples(config.data_dir, f"{DAY1}/e.parquet", [{**sample(60), "sm_active_pct": 101.0}])
    write_samples(config.data_dir, f"{DAY1}/f.parquet", [{**sample(70), "pcie_tx_bytes_s": -1.0}])
    write_samples(config.data_dir, f"{DAY1}/g.parquet", [{**sample(80), "mig_slice_fraction": 0.0}])
    late = {**sample(50), "ts": dt.datetime(1970, 1, 1, tzinfo=dt.UTC)}
    write_samples(config.data_dir, f"{DAY1}/d.parquet", [late])
    with pytest.warns(QuarantineWarning):
        result = ingest(config, compact=False)
    assert result.batches_read_by_duckdb == 1
    reasons = {q.path.rsplit("/", 1)[1]: q.reason for q in result.quarantined}
    assert reasons == {
        "c.parquet": "column interval_s: value nan is out of range (> 0 and <= 86400)",
        "d.parquet": (
            "column ts: value 1970-01-01 00:00:00 UTC is out of range (2026-11-15 to "
            "2026-11-17: the day of its folder date=2026-11-16, 1 day either side)"
        ),
        "e.parquet": "column sm_active_pct: value 101.0 is out of range (0 to 100)",
        "f.parquet": "column pcie_tx_bytes_s: value -1.0 is out of range (>= 0)",
        "g.parquet": "column mig_slice_fraction: value 0.0 is out of range (> 0 and <= 1)",
    }
    assert (result.samples_loaded, result.duplicates_skipped) == (3, 1)


def test_a_file_outside_a_date_folder_needs_a_time_within_the_limits(config: Config) -> None:
    """No folder day to judge by: from [ingest] earliest to the ingest's time plus
    [ingest] max_clock_skew_minutes."""
    write_samples(config.data_dir, "raw/samples/loose/a.parquet", [sample(0)])
    old = {**sample(0), "ts": dt.datetime(1970, 1, 1, tzinfo=dt.UTC)}
    write_samples(config.data_dir, "raw/samples/loose/b.parquet", [old])
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(days=2)
    write_samples(config.data_dir, "raw/samples/loose/c.parquet", [{**sample(0), "ts": soon}])
    with pytest.warns(QuarantineWarning):
        result = ingest(config, compact=False)
    reasons = {q.path.rsplit("/", 1)[1]: q.reason for q in result.quarantined}
    assert reasons.pop("b.parquet") == (
        "column ts: value 1970-01-01 00:00:00 UTC is out of range "
        "(before 2015-01-01, [ingest] earliest)"
    )
    assert re.fullmatch(
        rf"column ts: value {soon:%Y-%m-%d %H:%M:%S} UTC is out of range \(in the future: from "
        r"\S+ \S+ UTC on, the ingest's time plus \[ingest\] max_clock_skew_minutes = 1440\)",
        reasons.pop("c.parquet"),
    )
    assert (reasons, result.samples_loaded) == ({}, 1)


# --- the times any sample may have: [ingest] earliest and max_clock_skew_minutes ----------


def _in_folder(day: dt.date, name: str) -> str:
    return f"raw/samples/date={day}/host=h1/{name}"


def test_files_of_1970_and_2100_are_quarantined_and_stay_out_of_the_marts(
    config: Config,
) -> None:
    """A `date=1970-01-01` or `date=2100-01-01` folder names a day outside the times a
    sample may have: its files are quarantined with the reason whatever they hold (an
    empty one too), and the marts hold neither year."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
    for year in (1970, 2100):
        day = dt.date(year, 1, 1)
        start = dt.datetime.combine(day, dt.time(9), dt.UTC)
        rows = [sample(0, day=start), sample(10, day=start)]
        write_samples(config.data_dir, _in_folder(day, "a.parquet"), rows)
        write_samples(config.data_dir, _in_folder(day, "empty.parquet"), [])
    with pytest.warns(QuarantineWarning):
        result = ingest(config)
    reasons = {q.path: q.reason for q in result.quarantined}
    old, new = dt.date(1970, 1, 1), dt.date(2100, 1, 1)
    for name in ("a.parquet", "empty.parquet"):
        assert reasons.pop(_in_folder(old, name)) == (
            "its folder date=1970-01-01 is before 2015-01-01, [ingest] earliest"
        )
        assert re.fullmatch(
            r"its folder date=2100-01-01 is in the future: from \S+ \S+ UTC on, the ingest's "
            r"time plus \[ingest\] max_clock_skew_minutes = 1440",
            reasons.pop(_in_folder(new, name)),
        )
        assert (config.quarantine_dir / _in_folder(new, name)).is_file()
    assert (reasons, result.samples_loaded) == ({}, 2)
    build(config)
    for mart in ("gpu_daily", "team_daily", "host_daily"):
        days = query(config, f"select distinct day from {mart}")
        assert days == [(dt.date(2026, 11, 16),)], mart


# An ingest told that today is 2090-01-01 takes 00:00 of it for its time: with an hour of
# clock skew, a sample from 01:00 on is in the future.
FAR_DAY = dt.date(2090, 1, 1)
FAR = dt.datetime.combine(FAR_DAY, dt.time(), dt.UTC)
LIMITED = IngestConfig(earliest=dt.date(2026, 11, 16), max_clock_skew_minutes=60)
EARLY = dt.datetime(2026, 11, 15, 23, 59, 59, tzinfo=dt.UTC)  # in its folder's window
LATE = FAR + dt.timedelta(hours=1)


@pytest.mark.parametrize("way", ["polars", "DuckDB", "deduplicated", "sliced"])
def test_a_time_before_earliest_or_in_the_future_quarantines_its_file_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """A file with one sample before [ingest] earliest or in the future is quarantined
    whole, with the same reason whichever way its batch is read; the edges load."""
    config = Config(data_dir=tmp_path / "data", ingest=LIMITED)
    first, last = dt.datetime(2026, 11, 16, tzinfo=dt.UTC), LATE - dt.timedelta(seconds=1)
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [{**sample(0), "ts": first}])
    write_samples(
        config.data_dir,
        f"{DAY1}/early.parquet",
        [*map(sample, (10, 20, 30)), {**sample(40), "ts": EARLY}],
    )
    future = [sample(seconds, day=FAR) for seconds in (10, 20, 30)]
    write_samples(
        config.data_dir,
        _in_folder(FAR_DAY, "late.parquet"),
        [*future, {**sample(40, day=FAR), "ts": LATE}],
    )
    write_samples(config.data_dir, _in_folder(FAR_DAY, "b.parquet"), [{**sample(0), "ts": last}])
    if way == "DuckDB":  # as when polars does not read a file that DuckDB reads
        read_by_duckdb(monkeypatch)
    elif way == "deduplicated":  # rows that repeat a key
        write_samples(config.data_dir, f"{DAY1}/a2.parquet", [{**sample(0), "ts": first}])
        write_samples(
            config.data_dir, _in_folder(FAR_DAY, "b2.parquet"), [{**sample(0), "ts": last}]
        )
    elif way == "sliced":  # the 4-row files are read in slices
        monkeypatch.setattr(cut, "MAX_ROWS_PER_READ", 3)
    with pytest.warns(QuarantineWarning):
        result = ingest(config, compact=False, today=FAR_DAY)
    reasons = {q.path.rsplit("/", 1)[1]: q.reason for q in result.quarantined}
    assert reasons == {
        "early.parquet": (
            "column ts: value 2026-11-15 23:59:59 UTC is out of range "
            "(before 2026-11-16, [ingest] earliest)"
        ),
        "late.parquet": (
            "column ts: value 2090-01-01 01:00:00 UTC is out of range (in the future: from "
            "2090-01-01 01:00:00 UTC on, the ingest's time plus [ingest] max_clock_skew_minutes "
            "= 60)"
        ),
    }
    assert query(config, "select distinct ts from samples order by ts") == [(first,), (last,)]
    assert result.batches_read_by_duckdb == (2 if way == "DuckDB" else 0)


def test_a_dask_worker_checks_times_against_the_limits_of_the_ingest(config: Config) -> None:
    """A worker's configuration is bare: the ingest's limits travel with its task, and a
    batch with a file outside them is refused (the host sets the file aside)."""
    early = {**sample(10), "ts": EARLY}
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0), early])
    files = tuple(find_sample_files(config))
    task = LoadTask(
        index=0,
        count=1,
        data_dir=str(config.data_dir.absolute()),
        batches=(files,),
        listed={DAY1: tuple(file.path for file in files)},
        today=dt.date(2026, 11, 17),
        limits=time_limits(LIMITED, dt.datetime.now(dt.UTC)),
        run="0123456789ab",
    )
    assert run_load_task(task).batches == (None,)


def test_a_foreign_writers_float64_nan_is_caught_after_the_cast(config: Config) -> None:
    """A float64 column is cast to float32 on the one-pass read: a value too large for
    float32 becomes inf there, and is out of range like any other."""
    table = pa.Table.from_pylist([sample(0), sample(10)], schema=SAMPLE_SCHEMA)
    index = table.schema.get_field_index("power_w")
    wide = pa.array([300.0, 1e300], pa.float64())
    write_table(config.data_dir, f"{DAY1}/b.parquet", table.set_column(index, "power_w", wide))
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(20)])
    result = _ingest_expecting(config, f"{DAY1}/b.parquet")
    assert result.quarantined[0].reason == "column power_w: value inf is out of range (0 to 5000)"
    assert result.batches_read_by_duckdb == 0


def test_no_sample_loaded_holds_a_value_out_of_range(config: Config) -> None:
    """What reached the marts as NaN and 1.6e26 % before: nothing of it is loaded."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    for number, (column, value, _) in enumerate(OUT_OF_RANGE):
        row = {**sample(10 * number + 10), column: value}
        write_samples(config.data_dir, f"{DAY1}/bad{number:02d}.parquet", [row])
    with pytest.warns(QuarantineWarning):
        result = ingest(config, compact=False)
    assert len(result.quarantined) == len(OUT_OF_RANGE)
    assert query(
        config,
        "select count(*) from samples where not isfinite(gpu_util_pct) or gpu_util_pct > 100",
    ) == [(0,)]
    assert count(config) == 1
