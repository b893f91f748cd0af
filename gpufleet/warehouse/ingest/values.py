"""The values a sample may hold (docs/reference.md#valid-values), and the checks that set
aside a file holding any other: one line per measured column in `VALUE_RANGES`, the times of
a file from its `date=` folder's day (`TimeWindow`) and of any sample (`TimeLimits`).
`value_problems` checks a batch's rows, vectorised, in this order: a NULL in a required
column, a value that does not fit, a time out of its window, a value out of its range (in
the table's order), another site."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

from gpufleet.config import IngestConfig
from gpufleet.warehouse.base.folder_sites import folder_site, site_reason
from gpufleet.warehouse.base.raw_tables import (
    REQUIRED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    SAMPLE_TYPES,
)

FILE_INDEX = "_file_index"  # each row's file, its index in the batch
UNFIT = "_unfit"  # why a row's value did not fit its type (null where all did)
# No GPU board draws 5 kW (the largest draw about 1.4 kW): a higher figure is a unit error.
MAX_POWER_W = 5000.0
MAX_INTERVAL_S = 86_400.0  # a day
# How far a sample's time may lie outside the day its folder names (a collector's clock).
CLOCK_SKEW = dt.timedelta(days=1)


class ValueRange(NamedTuple):
    column: str
    low: float
    high: float | None = None  # None: no upper bound
    low_included: bool = True


VALUE_RANGES: tuple[ValueRange, ...] = (
    ValueRange("interval_s", 0.0, MAX_INTERVAL_S, low_included=False),
    ValueRange("gpu_util_pct", 0.0, 100.0),
    ValueRange("mem_util_pct", 0.0, 100.0),
    ValueRange("mem_used_bytes", 0),
    ValueRange("mem_total_bytes", 0),
    ValueRange("power_w", 0.0, MAX_POWER_W),
    ValueRange("power_limit_w", 0.0, MAX_POWER_W),
    ValueRange("energy_mj", 0),
    ValueRange("temp_gpu_c", -50, 200),
    ValueRange("temp_mem_c", -50, 200),
    ValueRange("sm_clock_mhz", 0),
    ValueRange("sm_clock_max_mhz", 0),
    ValueRange("mem_clock_mhz", 0),
    ValueRange("thermal_violation_ns", 0),
    ValueRange("power_violation_ns", 0),
    ValueRange("sm_active_pct", 0.0, 100.0),
    ValueRange("sm_occupancy_pct", 0.0, 100.0),
    ValueRange("tensor_active_pct", 0.0, 100.0),
    ValueRange("dram_active_pct", 0.0, 100.0),
    ValueRange("pcie_rx_bytes_s", 0.0),
    ValueRange("pcie_tx_bytes_s", 0.0),
    ValueRange("nvlink_rx_bytes_s", 0.0),
    ValueRange("nvlink_tx_bytes_s", 0.0),
    ValueRange("ecc_uncorrected_volatile", 0),
    ValueRange("ecc_corrected_volatile", 0),
    ValueRange("pcie_replay_count", 0),
    ValueRange("mig_slice_fraction", 0.0, 1.0, low_included=False),
)
# The columns the rules read: the required ones, those with a range, every integer column
# (a value may not fit its width) and `cluster` (in a site's folder, `base/folder_sites.py`).
CHECKED_COLUMNS = frozenset(
    {
        *REQUIRED_SAMPLE_COLUMNS,
        *(rule.column for rule in VALUE_RANGES),
        *(name for name, kind in SAMPLE_COLUMNS if kind.endswith(("int", "integer"))),
        "cluster",
    }
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_FLOAT32_COLUMNS = frozenset(name for name, kind in SAMPLE_COLUMNS if kind == "float")
_FLOAT_COLUMNS = _FLOAT32_COLUMNS | {name for name, kind in SAMPLE_COLUMNS if kind == "double"}


def range_text(rule: ValueRange) -> str:
    """The range as a reason names it: `0 to 100`, `> 0 and <= 86400`, `>= 0`."""
    if rule.high is None:
        return f"{'>=' if rule.low_included else '>'} {rule.low:g}"
    if rule.low_included:
        return f"{rule.low:g} to {rule.high:g}"
    return f"> {rule.low:g} and <= {rule.high:g}"


class TimeLimits(NamedTuple):
    """The times any sample may have, whatever its folder: from `earliest` to before
    `latest` (UTC), as `time_limits` sets them."""

    earliest: dt.datetime  # midnight of [ingest] earliest
    latest: dt.datetime  # the ingest's time plus [ingest] max_clock_skew_minutes
    skew_minutes: int

    @property
    def before_earliest(self) -> str:
        """A time before `earliest`, as a reason names it."""
        return f"before {self.earliest:%Y-%m-%d}, [ingest] earliest"

    @property
    def in_the_future(self) -> str:
        """A time from `latest` on, as a reason names it."""
        return (
            f"in the future: from {self.latest:%Y-%m-%d %H:%M:%S} UTC on, the ingest's time "
            f"plus [ingest] max_clock_skew_minutes = {self.skew_minutes}"
        )


def time_limits(ingest: IngestConfig, now: dt.datetime) -> TimeLimits:
    """The limits of an ingest at `now` (aware) under `ingest`'s keys."""
    skew = dt.timedelta(minutes=ingest.max_clock_skew_minutes)
    return TimeLimits(
        _midnight(ingest.earliest), now.astimezone(dt.UTC) + skew, ingest.max_clock_skew_minutes
    )


class TimeWindow(NamedTuple):
    """The times a file's samples may have: from `low` to before `high` (UTC)."""

    low: dt.datetime
    high: dt.datetime
    too_early: str  # a time before `low`, as a reason names it
    too_late: str  # a time from `high` on


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), dt.UTC)


def _folder_day(path: str) -> tuple[str, dt.date] | None:
    """The `date=` folder of a file at `path` (relative or absolute) and its day; None for a
    file outside one (or in one that names no date)."""
    for part in reversed(path.split("/")[:-1]):
        if part.startswith("date="):
            try:
                return part, dt.date.fromisoformat(part.removeprefix("date="))
            except ValueError:
                return None
    return None


def time_window(path: str, limits: TimeLimits) -> TimeWindow:
    """The window of a file at `path` (relative or absolute): its `date=` folder's UTC day,
    `CLOCK_SKEW` either side, within `limits`; `limits` alone for a file outside such a
    folder."""
    low, high = limits.earliest, limits.latest
    too_early, too_late = limits.before_earliest, limits.in_the_future
    folder = _folder_day(path)
    if folder is not None:
        part, day = folder
        first, last = day - CLOCK_SKEW, day + CLOCK_SKEW
        skew = f"{CLOCK_SKEW.days} day" + ("s" if CLOCK_SKEW.days != 1 else "")
        text = f"{first} to {last}: the day of its folder {part}, {skew} either side"
        if _midnight(first) >= low:
            low, too_early = _midnight(first), text
        if _midnight(last + dt.timedelta(days=1)) <= high:
            high, too_late = _midnight(last + dt.timedelta(days=1)), text
    return TimeWindow(low, high, too_early, too_late)


def folder_problem(path: str, limits: TimeLimits) -> str | None:
    """Why a file at `path` is set aside for its `date=` folder alone: the folder names a
    day before `limits.earliest`, or one that starts in the future; None when it does not."""
    folder = _folder_day(path)
    if folder is None:
        return None
    part, day = folder
    if _midnight(day) < limits.earliest:
        return f"its folder {part} is {limits.before_earliest}"
    if _midnight(day) >= limits.latest:
        return f"its folder {part} is {limits.in_the_future}"
    return None


def _micros(moment: dt.datetime) -> int:
    return (moment - _EPOCH) // dt.timedelta(microseconds=1)


def _shown(column: str, value: object) -> str:
    """A value as a reason shows it (a float32 column's as its shortest form, as DuckDB does)."""
    if column in _FLOAT32_COLUMNS and isinstance(value, float):
        return str(np.float32(value))
    return str(value)


def _shown_micros(micros: int) -> str:
    """A time given as microseconds since the epoch, as a reason shows it; one outside
    Python's years 1 to 9999 as its microseconds."""
    try:
        return f"{_EPOCH + dt.timedelta(microseconds=micros):%Y-%m-%d %H:%M:%S} UTC"
    except OverflowError:
        return f"{micros} microseconds from 1970-01-01 (past year 9999 or before year 1)"


def _out_of_range(rule: ValueRange) -> pl.Expr:
    column = pl.col(rule.column)
    inside = column >= rule.low if rule.low_included else column > rule.low
    if rule.high is not None:
        inside = inside & (column <= rule.high)
    outside = ~inside
    if rule.column in _FLOAT_COLUMNS:  # the infinities too where no bound is given
        outside = outside | column.is_nan() | column.is_infinite()
    return outside.fill_null(False)


def value_problems(frame: pl.DataFrame, paths: Sequence[str], limits: TimeLimits) -> dict[int, str]:
    """{file index: reason} for the files at `paths` (relative or absolute) with a row of
    `frame` that breaks the rules (a time outside `limits` or its folder's window, a
    `cluster` other than its folder's site among them): `frame` holds the contract columns,
    rows in file and row order, `_file_index` naming each row's file (an index into
    `paths`), and `_unfit` when a value did not fit its type (the reason, per row). One
    pass over the checked columns when every row is good."""
    unfit = UNFIT if UNFIT in frame.columns else None
    windows = [time_window(path, limits) for path in paths]
    sites = [folder_site(path) for path in paths]
    checks: list[tuple[pl.Expr, str, str]] = []  # (bad, kind, column)
    for name in REQUIRED_SAMPLE_COLUMNS:
        # (A value that did not fit its type is NULL after the cast: `unfit` names it.)
        null = pl.col(name).is_null()
        checks.append((null if unfit is None else null & pl.col(unfit).is_null(), "null", name))
    if unfit is not None:
        checks.append((pl.col(unfit).is_not_null(), "unfit", unfit))
    # Compared as microseconds since the epoch: whatever name the rows' zone has for UTC.
    lows, highs = [_micros(w.low) for w in windows], [_micros(w.high) for w in windows]
    if len(set(lows)) <= 1 and len(set(highs)) <= 1 and windows:
        low, high = pl.lit(lows[0]), pl.lit(highs[0])
    else:
        low = pl.lit(pl.Series(lows, dtype=pl.Int64)).gather(pl.col(FILE_INDEX))
        high = pl.lit(pl.Series(highs, dtype=pl.Int64)).gather(pl.col(FILE_INDEX))
    micros = pl.col("ts").dt.epoch("us")
    checks.append((((micros < low) | (micros >= high)).fill_null(False), "ts", "ts"))
    checks += [(_out_of_range(rule), "range", rule.column) for rule in VALUE_RANGES]
    if any(sites):
        site = (
            pl.lit(sites[0], pl.String)
            if len(set(sites)) == 1
            else pl.lit(pl.Series(sites, dtype=pl.String)).gather(pl.col(FILE_INDEX))
        )
        other = (pl.col("cluster") != "") & (pl.col("cluster") != site)  # "": no site
        checks.append((other.fill_null(False), "site", "cluster"))
    found = frame.select(bad.any().alias(str(n)) for n, (bad, _, _) in enumerate(checks)).row(0)
    failing = [n for n, hit in enumerate(found) if hit]
    if not failing:
        return {}
    first = pl.coalesce([pl.when(checks[n][0]).then(pl.lit(n)) for n in failing])
    columns = sorted({checks[n][2] for n in failing})
    # a time as microseconds: one past Python's years 1-9999 would not convert
    read_back = [pl.col(n).dt.epoch("us") if n == "ts" else pl.col(n) for n in columns]
    rows = (
        frame.lazy()
        .with_columns(first.alias("_check"))
        .filter(pl.col("_check").is_not_null())
        .group_by(FILE_INDEX, maintain_order=True)
        .first()
        .select(FILE_INDEX, "_check", *read_back)
        .collect()
    )
    problems: dict[int, str] = {}
    for row in rows.iter_rows(named=True):
        _, kind, column = checks[row["_check"]]
        index = int(row[FILE_INDEX])
        if kind == "null":
            problems[index] = f"null in required column {column}"
        elif kind == "unfit":
            problems[index] = str(row[column])
        elif kind == "site":
            problems[index] = site_reason(row[column], sites[index])
        elif kind == "ts":
            window, value_us = windows[index], int(row[column])
            early = value_us < _micros(window.low)
            text = window.too_early if early else window.too_late
            shown = _shown_micros(value_us)
            problems[index] = f"column ts: value {shown} is out of range ({text})"
        else:
            rule = next(r for r in VALUE_RANGES if r.column == column)
            shown = _shown(column, row[column])
            problems[index] = f"column {column}: value {shown} is out of range ({range_text(rule)})"
    return problems


def unfit_reason(column: str) -> pl.Expr:
    """The reason a value of `column` (its source value in `column`) does not fit its
    contract type, as a polars string expression."""
    kind = SAMPLE_TYPES[column].upper()
    return pl.format(f"column {column}: value {{}} does not fit {kind}", pl.col(column))
