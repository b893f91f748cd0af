"""Range-query answers -> some hosts' contract sample table for a window, one row per GPU and
step, built column by column in Arrow (a day of a thousand GPUs is tens of millions of
points: a Python loop per point would take most of the import).

Every series must carry the host and UUID labels (they are the row's key) and a whole GPU
index (and a MIG device's series a whole GPU instance id); a value must be a number.
Anything else fails the window with one line naming the query, and nothing of the window is
written.

A MIG device's row has `gpu_uuid` `MIG-<its GPU's UUID>/<GPU instance id>`: dcgm-exporter
gives a MIG device's series its GPU's UUID and the instance's id and profile, not the MIG
device's own UUID, so the importer makes one that stays the same as long as the instance
does (it is not the `MIG-...` UUID NVML gives the collector). Its `mig_slice_fraction` is
the profile's leading slice count (`3g.40gb`: 3) over the GPU's 7 (4 on an A30).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.collectors.schema import (
    COLLECTOR_SCHEMA,
    STATUS_OK,
    collector_schema_with_metadata,
)
from gpufleet.config import PrometheusConfig
from gpufleet.integrations.prometheus.api import PrometheusError
from gpufleet.integrations.prometheus.points import (
    all_points,
    numbers_array,
    pairs,
    point_times,
    times_array,
)
from gpufleet.integrations.prometheus.queries import NEW, XID_LABEL, Metric

_MAX_GPU_INDEX = 65535
_FLOAT32_MAX = 3.4e38
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
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "dram_active_pct",
    "pcie_rx_bytes_s",
    "pcie_tx_bytes_s",
    "nvlink_rx_bytes_s",
    "nvlink_tx_bytes_s",
    "ecc_uncorrected_volatile",
    "ecc_corrected_volatile",
    "pcie_replay_count",
)
# Columns that are true where their series' value is not 0 (a flag, a count of pages).
_FLAG_COLUMNS = ("remapped_rows_pending", "remapped_rows_failure", "retired_pages_pending")
_XID_COLUMN = "xid_errors"
_MAX_XID = 2**31 - 1
# A MIG profile's GPU slices (`3g.40gb`: 3), and a GPU's: 7 but on the A30's 4.
_PROFILE_SLICES = re.compile(r"^(\d+)g\.")
_GPU_SLICES = 7
_FOUR_SLICE_MODEL = re.compile(r"\bA30\b")


@dataclass(frozen=True)
class Gpu:
    """A GPU, or a MIG device (`parent` its GPU's UUID, `profile` its profile)."""

    uuid: str
    host: str
    index: int
    name: str | None
    parent: str | None = None
    profile: str | None = None

    @property
    def slice_fraction(self) -> float | None:
        """A MIG device's share of its GPU's slices; None for a GPU or an unknown profile."""
        match = _PROFILE_SLICES.match(self.profile or "")
        if self.parent is None or not match:
            return None
        slices = 4 if _FOUR_SLICE_MODEL.search(self.name or "") else _GPU_SLICES
        return min(int(match.group(1)) / slices, 1.0)


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
    labels = labels_of(series, query=query)
    model = labels.get(prometheus.model_label) or None
    instance = labels.get(prometheus.mig_instance_label)
    if not instance:
        return Gpu(uuid, host, index, model)
    if not (isinstance(instance, str) and instance.isascii() and instance.isdigit()):
        raise PrometheusError(
            f"query '{query}': GPU {uuid} has '{prometheus.mig_instance_label}'={instance!r}, "
            "not a GPU instance id"
        )
    profile = str(labels.get(prometheus.mig_profile_label) or "") or None
    return Gpu(f"MIG-{uuid}/{int(instance)}", host, index, model, uuid, profile)


def _bounds(column: str) -> tuple[float, float]:
    """The values a column's Arrow type holds (helper values that are no column: int64's)."""
    kind = COLLECTOR_SCHEMA.field(column).type if column in COLLECTOR_SCHEMA.names else pa.int64()
    if pa.types.is_integer(kind):
        bits = kind.bit_width
        if pa.types.is_unsigned_integer(kind):
            return 0, 2**bits - 1
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return -_FLOAT32_MAX, _FLOAT32_MAX


@dataclass
class HostSteps:
    """Some hosts' values in a window of `steps` steps from `first_s`: per column, the
    (row key, value) pairs its answer gave, a row key being GPU number * steps + step (a
    MIG device has a number of its own)."""

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
        if metric.reduce == NEW:
            self._add_codes(metric, answer, query=query, prometheus=prometheus)
            return
        rows, times, texts, _ = self._points(answer, query=query, prometheus=prometheus)
        values = numbers_array(texts, query=query)
        keys = self._keys(rows, times, query=query)
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

    def _points(
        self, answer: list[dict[str, Any]], *, query: str, prometheus: PrometheusConfig
    ) -> tuple[list[int], pa.Array, Sequence[Any], list[tuple[int, dict[str, Any]]]]:
        """Each point's GPU number, time (float64) and value text, and each series' (point
        count, labels)."""
        rows: list[int] = []
        times: list[Any] = []
        texts: list[Any] = []
        counts: list[tuple[int, dict[str, Any]]] = []
        every = all_points(answer)  # the usual answer: its points unzipped at once, in C
        for series in answer:
            gpu = gpu_of(series, prometheus=prometheus, query=query)
            number = self._numbers.setdefault(gpu, len(self.gpus))
            if number == len(self.gpus):
                self.gpus.append(gpu)
            values: Any = series.get("values")
            if every is not None:
                rows.extend([number] * len(values))
            elif pairs(values):  # a series of the usual shape in an odd answer
                series_times, series_texts = zip(*values, strict=True)
                times.extend(series_times)
                texts.extend(series_texts)
            else:  # no points, or points of odd shapes: read (or refused) one by one
                times.extend(point_times(series, query=query))
                texts.extend(value for _, value in values)
            if every is None:
                rows.extend([number] * (len(times) - len(rows)))
            counts.append((len(values), labels_of(series, query=query)))
        all_times, all_texts = (times, texts) if every is None else every
        return rows, times_array(all_times, answer, query=query), all_texts, counts

    def _keys(self, rows: list[int], times: pa.Array, *, query: str) -> pa.Array:
        """The row key of each point (GPU number and time); one outside the window fails."""
        step = pc.round(pc.divide(pc.subtract(times, self.first_s), self.step_s)).cast(pa.int64())
        if len(step) and not 0 <= pc.min(step).as_py() <= pc.max(step).as_py() < self.steps:
            outside = pc.min(step) if pc.min(step).as_py() < 0 else pc.max(step)
            moment = self.first_s + outside.as_py() * self.step_s
            raise PrometheusError(
                f"query '{query}': a point at time {moment}, outside the window asked for"
            )
        return pc.add(pc.multiply(pa.array(rows, pa.int64()), self.steps), step)

    def _add_codes(
        self,
        metric: Metric,
        answer: list[dict[str, Any]],
        *,
        query: str,
        prometheus: PrometheusConfig,
    ) -> None:
        """A NEW query's answer (queries.step_query): per GPU and step with a scrape, the
        codes new in the step, in order of code, 0 (no XID) left out; [] when none."""
        rows, times, _, counts = self._points(answer, query=query, prometheus=prometheus)
        keys = self._keys(rows, times, query=query)
        new: dict[int, set[int]] = {}
        at = 0
        for count, labels in counts:
            text = labels.get(XID_LABEL)
            if text is not None:
                code = _code(text, query=query)
                if code:
                    for key in keys[at : at + count].to_pylist():
                        new.setdefault(key, set()).add(code)
            at += count
        unique = pc.unique(keys)
        lists = pa.array(
            [sorted(new.get(key, ())) for key in unique.to_pylist()], pa.list_(pa.int32())
        )
        self.columns[metric.column] = (unique, lists)

    def table(self, metrics: tuple[Metric, ...]) -> pa.Table:
        """The contract table (schema and metadata of the collector's files), one row per
        GPU (or MIG device) and step with any value, sorted by GPU and time."""
        schema = collector_schema_with_metadata()
        if not self.columns:
            return schema.empty_table()
        keys = pc.unique(pa.concat_arrays([k for k, _ in self.columns.values()]))
        whole = {m.column for m in metrics if m.whole}

        def column(name: str) -> pa.Array:
            if name not in self.columns:
                kind = schema.field(name).type if name == _XID_COLUMN else pa.float64()
                return pa.nulls(len(keys), kind)
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

        def of_gpu(values: list[Any], kind: pa.DataType) -> pa.Array:
            return pc.take(pa.array(values, kind), gpu)

        values: dict[str, pa.Array] = {
            "ts": ts_us,
            "interval_s": pa.array([float(self.step_s)] * len(keys)),
            "host": of_gpu([g.host for g in self.gpus], pa.string()),
            "gpu_index": of_gpu([g.index for g in self.gpus], pa.int64()),
            "gpu_uuid": of_gpu([g.uuid for g in self.gpus], pa.string()),
            "gpu_name": of_gpu([g.name for g in self.gpus], pa.string()),
            "status": pa.array([STATUS_OK] * len(keys)),
            "gpu_util_pct": util,
            "mem_total_bytes": pc.add(pc.add(used, free), reserved),
            "mig_enabled": self._mig_enabled(keys, gpu, step),
            _XID_COLUMN: column(_XID_COLUMN),
            "parent_gpu_uuid": of_gpu([g.parent for g in self.gpus], pa.string()),
            "mig_profile": of_gpu([g.profile for g in self.gpus], pa.string()),
            "mig_slice_fraction": of_gpu([g.slice_fraction for g in self.gpus], pa.float64()),
        }
        values |= {name: column(name) for name in _PLAIN_COLUMNS}
        values |= {name: pc.not_equal(column(name), 0) for name in _FLAG_COLUMNS}
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

    def _mig_enabled(self, keys: pa.Array, gpu: pa.Array, step: pa.Array) -> pa.Array:
        """True on a MIG device's rows and on its GPU's rows of the same steps (as the
        collector writes a MIG-enabled GPU), else null: the series do not say."""
        numbers = {(g.uuid, g.host): n for n, g in enumerate(self.gpus) if g.parent is None}
        # Per GPU number: -1 for a GPU, its GPU's number for a MIG device (-2: none seen).
        parent = [
            -1 if g.parent is None else numbers.get((g.parent, g.host), -2) for g in self.gpus
        ]
        of_row = pc.take(pa.array(parent, pa.int64()), gpu)
        is_mig = pc.not_equal(of_row, -1)
        parents = pc.filter(pc.add(pc.multiply(of_row, self.steps), step), pc.greater(of_row, -1))
        enabled = pc.or_(is_mig, pc.is_in(keys, value_set=parents))
        return pc.if_else(enabled, True, pa.scalar(None, pa.bool_()))


def _code(text: Any, *, query: str) -> int:
    """An XID code a NEW query's answer names in its label; one that is not fails."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = -1.0
    if not (0 <= value <= _MAX_XID and value.is_integer()):
        raise PrometheusError(f"query '{query}': {XID_LABEL}={text!r}, not an XID code")
    return int(value)
