"""A range-query answer's points as Arrow arrays: their times and their values' texts.

The usual answer (every series' `values` a list of `[time, value]` pairs, as Prometheus
gives them) is unzipped at once, in C; an answer of any other shape is read series by
series, point by point, and a point that is no time fails naming the query.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.integrations.prometheus.api import PrometheusError

_LAST_TIME_S = 253402300800.0  # 10000-01-01: no point of a range query is later
_TIME, _VALUE = operator.itemgetter(0), operator.itemgetter(1)


def point_times(series: dict[str, Any], *, query: str) -> list[float]:
    """The times (seconds) of a series' points, each a time since the epoch before
    `_LAST_TIME_S`."""
    values = series.get("values")
    try:
        if not isinstance(values, list):
            raise TypeError("no values")
        times = [float(time) for time, _ in values]
    except (TypeError, ValueError):
        raise PrometheusError(
            f"query '{query}': a series whose points are not [time, value]"
        ) from None
    for time in times:
        if not 0 <= time < _LAST_TIME_S:  # NaN too
            raise PrometheusError(f"query '{query}': a point at time {time!r}, not a time")
    return times


def pairs(values: Any) -> bool:
    """Whether `values` is a non-empty list of [time, value] pairs, as Prometheus answers."""
    if not isinstance(values, list) or not values:
        return False
    return set(map(type, values)) <= {list, tuple} and set(map(len, values)) == {2}


def all_points(answer: list[Any]) -> tuple[Sequence[Any], Sequence[Any]] | None:
    """The times and values of every point of the usual answer, in the order of its series,
    unzipped at once; None for an answer of any other shape (to be read series by series)."""
    values: list[Any] = [s.get("values") if isinstance(s, dict) else None for s in answer]
    if not all(isinstance(points, list) for points in values):
        return None
    flat = list(itertools.chain.from_iterable(values))
    if not flat:
        return [], []
    if not pairs(flat):
        return None
    return list(map(_TIME, flat)), list(map(_VALUE, flat))  # zip(*flat): 10x the CPU


def times_array(times: Sequence[Any], answer: list[dict[str, Any]], *, query: str) -> pa.Array:
    """The points' times as float64, each a time since the epoch before `_LAST_TIME_S`; a
    time that is not fails as `point_times` says."""
    try:
        array = pa.array(times, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # not a number (or a text of one)
        array = None
    if array is not None and (
        not len(array)
        or (
            array.null_count == 0
            and not pc.any(pc.is_nan(array)).as_py()
            and pc.min(array).as_py() >= 0
            and pc.max(array).as_py() < _LAST_TIME_S
        )
    ):
        return array
    # One by one, as point_times reads them: it fails on the first that is no time.
    flat = [time for series in answer for time in point_times(series, query=query)]
    return pa.array(flat, pa.float64())  # none refused: texts of times, as float() reads


def numbers_array(texts: Sequence[Any], *, query: str) -> pa.Array:
    """The values as float64; one that is not a number fails, naming it."""
    try:
        return pa.array(texts, pa.string()).cast(pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        for text in texts:
            try:
                float(text)
            except (TypeError, ValueError):
                raise PrometheusError(
                    f"query '{query}': a value that is not a number: {text!r}"
                ) from None
        raise PrometheusError(f"query '{query}': values that are not numbers") from None
