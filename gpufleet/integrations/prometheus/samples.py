"""Range-query answers -> one host's contract sample table for a window, one row per GPU and
step, built column by column in Arrow (a day of a thousand GPUs is tens of millions of
points: a Python loop per point would take most of the import).

Every series must carry the host and UUID labels (they are the row's key) and a whole GPU
index; a value must be a number. Anything else fails the window with one line naming the
query, and nothing of the window is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.collectors.schema import SAMPLE_SCHEMA, STATUS_OK, schema_with_metadata
from gpufleet.config_sources import PrometheusConfig
from gpufleet.integrations.prometheus.api import PrometheusError
from gpufleet.integrations.prometheus.queries import Metric

_MAX_GPU_INDEX = 65535
_FLOAT32_MAX = 3.4e38
_LAST_TIME_S = 253402300800.0  # 10000-01-01: no point of a range query is later
# Columns whose value is their series' as it is (after scale and rounding).
_PLAIN_COLUMNS = (
    "mem_util_pct",
    "mem_used_bytes",
    "power_w",
    "power_limit_w",
    "energy_mj",
    "temp_gpu_c",
    "temp_mem_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "clock_event_mask",
    "thermal_violation_ns",
    "power_violation_ns",
)


@dataclass(frozen=True)
class Gpu:
    uuid: str
    host: str
    index: int
    name: str | None


def labels_of(series: Any, *, query: str) -> dict[str, Any]:
    """A series' labels; a series that is not `{"metric": {...}, "values": [...]}` fails."""
    labels = (series.get("metric") or {}) if isinstance(series, dict) else None
    if not isinstance(labels, dict):
        raise PrometheusError(
            f"query '{query}': a series that is not an object of labels and points"
        )
    return labels


def label(series: dict[str, Any], name: str, *, query: str) -> str:
    """A label every series of the answer must carry."""
    labels = labels_of(series, query=query)
    value = labels.get(name)
    if not value:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(labels.items())) or "no labels"
        raise PrometheusError(f"query '{query}': a series without the '{name}' label ({shown})")
    return str(value)


def gpu_of(series: dict[str, Any], *, prometheus: PrometheusConfig, query: str) -> Gpu:
    """The GPU a series of the answer describes, from its labels."""
    uuid = label(series, prometheus.uuid_label, query=query)
    host = label(series, prometheus.host_label, query=query)
    text = label(series, prometheus.gpu_label, query=query)
    try:
        index = int(text)
    except ValueError:
        index = -1
    if not 0 <= index <= _MAX_GPU_INDEX:
        raise PrometheusError(
            f"query '{query}': GPU {uuid} has '{prometheus.gpu_label}'={text!r}, not a GPU index"
        )
    model = labels_of(series, query=query).get(prometheus.model_label) or None
    return Gpu(uuid, host, index, model)


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


def _numbers(texts: list[Any], *, query: str) -> pa.Array:
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


def _bounds(column: str) -> tuple[float, float]:
    """The values a column's Arrow type holds (helper values that are no column: int64's)."""
    kind = SAMPLE_SCHEMA.field(column).type if column in SAMPLE_SCHEMA.names else pa.int64()
    if pa.types.is_integer(kind):
        bits = kind.bit_width
        if pa.types.is_unsigned_integer(kind):
            return 0, 2**bits - 1
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return -_FLOAT32_MAX, _FLOAT32_MAX


@dataclass
class HostSteps:
    """One host's values in a window of `steps` steps from `first_s`: per column, the
    (row key, value) pairs its answer gave, a row key being GPU number * steps + step."""

    step_s: int
    first_s: int
    steps: int
    gpus: list[Gpu] = field(default_factory=list)
    columns: dict[str, tuple[pa.Array, pa.Array]] = field(default_factory=dict)
    _numbers: dict[Gpu, int] = field(default_factory=dict)

    def add(
        self,
        metric: Metric,
        answer: list[dict[str, Any]],
        *,
        query: str,
        prometheus: PrometheusConfig,
    ) -> None:
        rows: list[int] = []
        times: list[float] = []
        texts: list[Any] = []
        for series in answer:
            gpu = gpu_of(series, prometheus=prometheus, query=query)
            number = self._numbers.setdefault(gpu, len(self.gpus))
            if number == len(self.gpus):
                self.gpus.append(gpu)
            series_times = point_times(series, query=query)
            times.extend(series_times)
            texts.extend(value for _, value in series["values"])
            rows.extend([number] * len(series_times))
        values = _numbers(texts, query=query)
        step = pc.round(
            pc.divide(pc.subtract(pa.array(times, pa.float64()), self.first_s), self.step_s)
        ).cast(pa.int64())
        if len(step) and not 0 <= pc.min(step).as_py() <= pc.max(step).as_py() < self.steps:
            outside = pc.min(step) if pc.min(step).as_py() < 0 else pc.max(step)
            moment = self.first_s + outside.as_py() * self.step_s
            raise PrometheusError(
                f"query '{query}': a point at time {moment}, outside the window asked for"
            )
        keys = pc.add(pc.multiply(pa.array(rows, pa.int64()), self.steps), step)
        finite = pc.is_finite(values)  # Prometheus' NaN and infinities: no value
        keys, values = pc.filter(keys, finite), pc.multiply(pc.filter(values, finite), metric.scale)
        low, high = _bounds(metric.column)
        extremes = pc.min_max(values)
        if len(values) and not low <= extremes["min"].as_py() <= extremes["max"].as_py() <= high:
            bad = extremes["min"] if extremes["min"].as_py() < low else extremes["max"]
            raise PrometheusError(
                f"query '{query}': a value out of the range of {metric.column}: "
                f"{bad.as_py() / metric.scale!r}"
            )
        self.columns[metric.column] = (keys, values)

    def table(self, metrics: tuple[Metric, ...]) -> pa.Table:
        """The contract table (schema and metadata of the collector's files), one row per
        GPU and step with any value, sorted by GPU and time."""
        if not self.columns:
            return schema_with_metadata().empty_table()
        keys = pc.unique(pa.concat_arrays([k for k, _ in self.columns.values()]))
        whole = {m.column for m in metrics if m.whole}

        def column(name: str) -> pa.Array:
            if name not in self.columns:
                return pa.nulls(len(keys), pa.float64())
            own_keys, values = self.columns[name]
            taken = pc.take(values, pc.index_in(keys, value_set=own_keys))
            return pc.round(taken) if name in whole else taken

        gpu = pc.divide(keys, self.steps)
        step = pc.subtract(keys, pc.multiply(gpu, self.steps))
        ts_us = pc.multiply(pc.add(pc.multiply(step, self.step_s), self.first_s), 1_000_000)
        util = column("gpu_util_pct")
        util = pc.if_else(pc.is_null(util), pc.multiply(column("engine_active_ratio"), 100), util)
        used, free = column("mem_used_bytes"), column("mem_free_bytes")
        reserved = pc.fill_null(column("mem_reserved_bytes"), 0.0)
        values: dict[str, pa.Array] = {
            "ts": ts_us,
            "interval_s": pa.array([float(self.step_s)] * len(keys)),
            "host": pc.take(pa.array([g.host for g in self.gpus]), gpu),
            "gpu_index": pc.take(pa.array([g.index for g in self.gpus]), gpu),
            "gpu_uuid": pc.take(pa.array([g.uuid for g in self.gpus]), gpu),
            "gpu_name": pc.take(pa.array([g.name for g in self.gpus], pa.string()), gpu),
            "status": pa.array([STATUS_OK] * len(keys)),
            "gpu_util_pct": util,
            "mem_total_bytes": pc.add(pc.add(used, free), reserved),
        }
        values |= {name: column(name) for name in _PLAIN_COLUMNS}
        schema = schema_with_metadata()
        arrays = []
        for target in schema:
            given = values.get(target.name)
            if given is None:
                arrays.append(pa.nulls(len(keys), target.type))
            elif pa.types.is_timestamp(target.type):
                arrays.append(given.cast(pa.int64()).cast(target.type))
            else:
                arrays.append(given.cast(target.type))
        table = pa.Table.from_arrays(arrays, schema=schema)
        return table.sort_by([("gpu_uuid", "ascending"), ("ts", "ascending")])
