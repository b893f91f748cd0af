"""NVML GPM (GPU performance monitoring, Hopper and newer): SM, tensor and DRAM activity and
PCIe and NVLink traffic, each a mean over one tick's interval, for a GPU or for one GPU
instance of a MIG-enabled GPU.

GPM computes its metrics between two samples. Each series (a GPU, or a MIG device) holds
two samples, allocated once: each tick takes one into the slot of the older, and the metrics
are those between the previous tick's sample and this one. A series without a previous
sample (a MIG device's first tick, a sample that failed) has null activity, never 0.
"""

from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import pynvml

from gpufleet.collectors.values import clamp_pct, gpm_values

if TYPE_CHECKING:
    from gpufleet.collectors.safenvml import Nvml

MIB = 1024.0 * 1024.0


class GpmMetric(NamedTuple):
    """One GPM metric: the sample field it fills and NVML's id for it."""

    field: str
    metric_id: int
    bytes_per_mib: float | None = None  # a rate in MiB/s (NVML's unit) -> bytes/s; else a %


GPM_METRICS = (
    GpmMetric("sm_active_pct", pynvml.NVML_GPM_METRIC_SM_UTIL),
    GpmMetric("sm_occupancy_pct", pynvml.NVML_GPM_METRIC_SM_OCCUPANCY),
    GpmMetric("tensor_active_pct", pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL),
    GpmMetric("dram_active_pct", pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL),
    GpmMetric("pcie_rx_bytes_s", pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, MIB),
    GpmMetric("pcie_tx_bytes_s", pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, MIB),
    GpmMetric("nvlink_rx_bytes_s", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, MIB),
    GpmMetric("nvlink_tx_bytes_s", pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, MIB),
)
GPM_FIELDS = tuple(metric.field for metric in GPM_METRICS)


@dataclass(slots=True)
class GpmSeries:
    """The two GPM samples of one GPU or MIG device, and which holds the last tick's."""

    samples: tuple[Any, Any]  # pynvml c_nvmlGpmSample_t, allocated once
    taken: int = -1  # the slot sampled at the last tick; -1: no usable previous sample


def free_series(series: GpmSeries) -> None:
    """Give a series' samples back to NVML (errors ignored: on the way out or re-init)."""
    for sample in series.samples:
        with contextlib.suppress(pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            pynvml.nvmlGpmSampleFree(sample)


class Gpm:
    """Reads GPM activity through the collector's one NVML wrapper."""

    def __init__(self, *, nvml: Nvml) -> None:
        self._nvml = nvml
        # One metrics request, reused: its metric ids are set once, its samples each call.
        self._request = pynvml.c_nvmlGpmMetricsGet_t()
        self._request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        self._request.numMetrics = len(GPM_METRICS)
        for i, metric in enumerate(GPM_METRICS):
            self._request.metrics[i].metricId = metric.metric_id

    def is_supported(self, uuid: str, handle: Any) -> bool | None:
        """Whether the GPU supports GPM; None when NVML did not answer this time."""
        answer = self._nvml.call(uuid, "gpm", ("nvmlGpmQueryDeviceSupport",), handle)
        if answer is None:
            return False if self._nvml.is_unsupported(uuid, "gpm") else None
        return bool(answer.isSupportedDevice)

    def sample(
        self, series: dict[str, GpmSeries], key: str, api: str, *args: Any
    ) -> list[float | None] | None:
        """Take this tick's sample of `key` (the pynvml function `api`, called with `args`
        and the sample) and return the values of GPM_METRICS since the previous sample;
        None when there is none."""
        one = series.get(key)
        if one is None:
            one = self._allocate(key)
            if one is None:
                return None
            series[key] = one
        slot = 1 if one.taken == 0 else 0
        fresh = one.samples[slot]
        if self._nvml.call(key, "gpm_sample", (api,), *args, fresh) is None:
            one.taken = -1  # the next tick's metrics would span two intervals: none then
            return None
        previous, one.taken = one.taken, slot
        if previous < 0:
            return None
        return self._metrics(key, one.samples[previous], fresh)

    def _allocate(self, key: str) -> GpmSeries | None:
        first = self._nvml.call(key, "gpm_alloc", ("nvmlGpmSampleAlloc",))
        if first is None:
            return None
        second = self._nvml.call(key, "gpm_alloc", ("nvmlGpmSampleAlloc",))
        if second is None:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(first)
            return None
        return GpmSeries(samples=(first, second))

    def _metrics(self, key: str, older: Any, newer: Any) -> list[float | None] | None:
        request = self._request
        # ctypes' own setattr: pynvml's structures add a Python-level one, a call each
        ctypes.Structure.__setattr__(request, "sample1", older)
        ctypes.Structure.__setattr__(request, "sample2", newer)
        if self._nvml.call(key, "gpm_metrics", ("nvmlGpmMetricsGet",), request) is None:
            return None
        values = gpm_values(request, len(GPM_METRICS))
        for i, scale in _SCALES:
            value = values[i]
            if value is not None:
                values[i] = clamp_pct(value) if scale is None else max(value, 0.0) * scale
        return values


_SCALES = tuple(enumerate(metric.bytes_per_mib for metric in GPM_METRICS))
