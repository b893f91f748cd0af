"""Fuzzing the sample files (Parquet under raw/samples): values at and past their limits,
nulls where none may be, columns missing, added, renamed or of another type, names with
any character, times far from their folder's day, folders of odd names. `gpufleet ingest`
exits 0 whatever a file holds: each file is loaded or quarantined (moved to quarantine/,
listed in quarantined_files), a good file beside it loads, and a second ingest is quiet."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from tests.fuzzing import CELLS, assert_kept, examples, run_cli, scratch, tree, written_outside
from tests.test_ingest import T0, reading, sample, write_samples

pytestmark = pytest.mark.fleet

GOOD = "raw/samples/date=2026-11-16/host=good/good.parquet"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# Times as microseconds since the epoch: the folder's day, its neighbours, 1970, before
# 2015, far ahead, the ends of the type.
TIMES_US = st.one_of(
    st.sampled_from(
        [
            int((T0 - EPOCH).total_seconds() * 1e6),
            int((T0 - EPOCH + dt.timedelta(days=1, hours=23)).total_seconds() * 1e6),
            int((T0 - EPOCH - dt.timedelta(days=3)).total_seconds() * 1e6),
            0,
            -1,
            1_300_000_000_000_000,  # 2011
            4_102_444_800_000_000,  # 2100
            253_402_300_799_000_000,  # 9999-12-31
            2**63 - 1,
            -(2**63),
        ]
    ),
    st.integers(-(2**63), 2**63 - 1),
)
TEXTS = st.one_of(st.sampled_from(CELLS), st.text(max_size=10))
OTHER_TYPES = (
    pa.string(),
    pa.int64(),
    pa.float64(),
    pa.bool_(),
    pa.timestamp("us"),
    pa.timestamp("ns", tz="UTC"),
    pa.timestamp("s", tz="Europe/Berlin"),
    pa.date32(),
    pa.binary(),
    pa.decimal128(20, 3),
    pa.list_(pa.int32()),
    pa.struct([("a", pa.int32())]),
    pa.null(),
)


def _values(draw: st.DrawFn, kind: pa.DataType, count: int) -> pa.Array:
    """`count` values of type `kind`, chosen to hurt: limits, NaN, nulls, odd text."""
    if pa.types.is_timestamp(kind):
        micros = draw(st.lists(st.one_of(TIMES_US, st.none()), min_size=count, max_size=count))
        return pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz=kind.tz))
    if pa.types.is_floating(kind):
        items = st.one_of(st.floats(width=32 if kind == pa.float32() else 64), st.none())
    elif pa.types.is_integer(kind):
        bits, signed = kind.bit_width, pa.types.is_signed_integer(kind)
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
        items = st.one_of(st.integers(low, high), st.sampled_from([low, high, 0]), st.none())
    elif pa.types.is_string(kind):
        items = st.one_of(TEXTS, st.none())
    elif pa.types.is_boolean(kind):
        items = st.one_of(st.booleans(), st.none())
    elif pa.types.is_list(kind) and pa.types.is_struct(kind.value_type):  # processes
        process = st.fixed_dictionaries(
            {
                "pid": st.integers(0, 2**32 - 1),
                "user": TEXTS,
                "used_mem_bytes": st.one_of(st.integers(-(2**63), 2**63 - 1), st.none()),
                "job_id": st.one_of(TEXTS, st.none()),
            }
        )
        items = st.one_of(st.lists(process, max_size=3), st.none())
    elif pa.types.is_date(kind):
        items = st.one_of(st.integers(-(2**31), 2**31 - 1), st.none())
        days = draw(st.lists(items, min_size=count, max_size=count))
        return pa.array(days, pa.int32()).cast(pa.date32())
    elif pa.types.is_null(kind):
        return pa.nulls(count)
    else:  # another type: its nulls
        return pa.nulls(count, kind)
    return pa.array(draw(st.lists(items, min_size=count, max_size=count)), kind)


@st.composite
def sample_tables(draw: st.DrawFn) -> pa.Table:
    """A collector's rows with a few of their columns dropped, emptied, given other values
    or another type, renamed, or joined by columns of any name."""
    rows = [sample(10 * n) for n in range(draw(st.integers(1, 3)))]
    table = pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)
    names, arrays = (
        list(table.column_names),
        [table[n].combine_chunks() for n in table.column_names],
    )
    for _ in range(draw(st.integers(1, 4))):
        change = draw(st.sampled_from(["drop", "null", "values", "values", "type", "name", "add"]))
        at = draw(st.integers(0, len(names) - 1)) if names else 0
        if change == "drop" and names:
            del names[at], arrays[at]
        elif change == "null" and names:
            arrays[at] = pa.nulls(len(table), arrays[at].type)
        elif change == "values" and names:
            arrays[at] = _values(draw, arrays[at].type, len(table))
        elif change == "type" and names:
            arrays[at] = _values(draw, draw(st.sampled_from(OTHER_TYPES)), len(table))
        elif change == "name" and names:
            names[at] = draw(st.one_of(TEXTS, st.sampled_from(SAMPLE_SCHEMA.names)))
        else:
            names.append(draw(st.one_of(TEXTS, st.sampled_from(["file_index", "Host", "ts "]))))
            arrays.append(_values(draw, draw(st.sampled_from(OTHER_TYPES)), len(table)))
    metadata = draw(st.sampled_from([file_metadata(), {}, {b"gpufleet.schema_version": b"99"}]))
    return pa.Table.from_arrays(arrays, names=names).replace_schema_metadata(metadata)


FOLDERS = st.one_of(
    st.just("raw/samples/date=2026-11-16/host=h1"),
    st.sampled_from(
        [
            "raw/samples/date=2014-12-31/host=h1",
            "raw/samples/date=1900-01-01/host=h1",
            "raw/samples/date=9999-12-31/host=h1",
            "raw/samples/date=2026-13-01/host=h1",
            "raw/samples/date=x/host=h1",
            "raw/samples/host=h1",
            "raw/samples/date=2026-11-16",
            "raw/samples/date=2026-11-16/host=h1@nowhere",
            "raw/samples/date=2026-11-16/host=h\x1b[31m",
            "raw/samples/date=2026-11-16/host=h\nx",
        ]
    ),
    TEXTS.filter(lambda t: t and "/" not in t and "\x00" not in t and t not in {".", ".."}).map(
        lambda t: f"raw/samples/date=2026-11-16/host={t}"
    ),
)


def _query(data_dir: Path, sql: str) -> list[tuple[Any, ...]]:
    with reading(data_dir / "warehouse.duckdb") as con:
        return con.execute(sql).fetchall()


def _good_and_quarantined(data_dir: Path) -> tuple[int, list[tuple[Any, ...]]]:
    """The good file's samples and the quarantined files, the warehouse opened once."""
    with reading(data_dir / "warehouse.duckdb") as con:
        found = con.execute("select count(*) from samples where gpu_uuid = 'GPU-good'")
        good = found.fetchone()
        quarantined = con.execute("select path, reason from quarantined_files").fetchall()
    return (good[0] if good else 0), quarantined


@given(table=sample_tables(), folder=FOLDERS)
@examples(10)
def test_ingest_loads_or_quarantines_each_file_and_the_rest_loads(
    table: pa.Table, folder: str
) -> None:
    with scratch() as root:
        data_dir = root / "data"
        write_samples(data_dir, GOOD, [sample(0, gpu="GPU-good"), sample(10, gpu="GPU-good")])
        fuzzed = data_dir / folder / "fuzzed.parquet"
        try:
            fuzzed.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, fuzzed)
        except (pa.ArrowException, OSError, ValueError):
            reject()  # not a file a writer could make
        before = tree(root)
        argv = ["--data-dir", str(data_dir), "ingest"]

        outcome = run_cli(argv)
        assert_kept(outcome)
        assert outcome.status == 0, outcome  # a bad raw file never fails ingest
        assert not written_outside(root, data_dir, before)
        good, quarantined = _good_and_quarantined(data_dir)
        assert good == 2
        relative = fuzzed.relative_to(data_dir).as_posix()
        if quarantined:  # else loaded, or not a sample file's place (no host= folder)
            assert [path for path, _ in quarantined] == [relative]
            assert (data_dir / "quarantine" / relative).is_file()
            assert not fuzzed.exists()
        again = run_cli(argv)
        assert again.status == 0, again
        assert _good_and_quarantined(data_dir) == (2, quarantined)


def test_a_file_past_its_limits_is_quarantined_and_named(tmp_path: Path) -> None:
    """The fuzz test's baseline, by hand: a power of 1e9 W is set aside, the rest loads."""
    data_dir = tmp_path / "data"
    write_samples(data_dir, GOOD, [sample(0, gpu="GPU-good")])
    row = sample(0) | {"power_w": 1e9}
    write_samples(data_dir, "raw/samples/date=2026-11-16/host=h1/bad.parquet", [row])
    outcome = run_cli(["--data-dir", str(data_dir), "ingest"])
    assert outcome.status == 0, outcome
    assert "1 quarantined" in outcome.stdout
    assert (data_dir / "quarantine/raw/samples/date=2026-11-16/host=h1/bad.parquet").is_file()
    assert _query(data_dir, "select count(*) from samples") == [(1,)]


@pytest.mark.parametrize("micros", [2**63 - 1, -(2**63), 253_403_300_799_000_000])
def test_a_time_at_the_ends_of_its_type_is_quarantined(tmp_path: Path, micros: int) -> None:
    """Found by `make fuzz`: a `ts` of int64's largest or smallest value, or past year 9999,
    made ingest abort (a polars panic, or OverflowError naming the value) instead of
    quarantining the file."""
    data_dir = tmp_path / "data"
    write_samples(data_dir, GOOD, [sample(0, gpu="GPU-good")])
    table = pa.Table.from_pylist([sample(0)], schema=SAMPLE_SCHEMA)
    ts = pa.array([micros], pa.int64()).cast(SAMPLE_SCHEMA.field("ts").type)
    bad = data_dir / "raw/samples/date=2026-11-16/host=h1/bad.parquet"
    bad.parent.mkdir(parents=True)
    pq.write_table(table.set_column(0, SAMPLE_SCHEMA.field("ts"), ts), bad)
    outcome = run_cli(["--data-dir", str(data_dir), "ingest"])
    assert outcome.status == 0, outcome
    assert "1 quarantined" in outcome.stdout
    assert _query(data_dir, "select count(*) from samples") == [(1,)]
