"""NVML's value union (c_nvmlValue_t): reading it from sample buffers and field values; and the
values of a GPM metrics request."""

from __future__ import annotations

import contextlib
import ctypes
import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import pynvml

# The member of c_nvmlValue_t that holds a value, by NVML value type (NVML_VALUE_TYPE_*).
VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def value_member(value_type: int) -> str:
    """The union member to read for `value_type`; `uiVal` for a type this code does not know."""
    return VALUE_MEMBERS[value_type] if 0 <= value_type < len(VALUE_MEMBERS) else "uiVal"


# c_nvmlSample_t is a u64 timestamp and an 8-byte c_nvmlValue_t union; struct codes by value
# type (dVal, uiVal, ulVal, ullVal, sllVal, siVal, usVal), padded to the union's 8 bytes,
# in native byte order.
_ULONG = "=QQ" if ctypes.sizeof(ctypes.c_ulong) == 8 else "=QI4x"
_SAMPLE_FORMATS = ("=Qd", "=QI4x", _ULONG, "=QQ", "=Qq", "=Qi4x", "=QH6x")


def sample_pairs(samples: Sequence[Any], value_type: int) -> Iterable[tuple[int, float]]:
    """(timestamp_us, value) of NVML samples.

    pynvml returns the samples as views into one ctypes array, and its structures read every
    field through a Python-level `__getattribute__`, a call each: 60 samples x 2 kinds x 8
    GPUs per tick add up. So, when the views are contiguous, the whole buffer is
    unpacked in one `struct.iter_unpack`; otherwise each sample is read field by field.
    """
    if not samples:
        return ()
    known_type = 0 <= value_type < len(_SAMPLE_FORMATS)
    size = ctypes.sizeof(pynvml.c_nvmlSample_t)
    if known_type and size == 16 and type(samples[0]) is pynvml.c_nvmlSample_t:
        start = ctypes.addressof(samples[0])
        with contextlib.suppress(TypeError):  # not all ctypes objects: read field by field
            addresses = list(map(ctypes.addressof, samples))
            if addresses == list(range(start, start + size * len(samples), size)):
                raw = ctypes.string_at(start, size * len(samples))
                return [
                    (t, float(v)) for t, v in struct.iter_unpack(_SAMPLE_FORMATS[value_type], raw)
                ]
    member = value_member(value_type)
    pairs = []
    for s in samples:
        pairs.append((int(s.timeStamp), float(getattr(s.sampleValue, member))))
    return pairs


def clamp_pct(value: float) -> float:
    """A percentage NVML reported, kept within 0-100."""
    return min(max(float(value), 0.0), 100.0)


# c_nvmlGpmMetric_t: metricId (uint), nvmlReturn (uint), value (double), then metricInfo (three
# pointers), 40 bytes on 64-bit hosts.
_GPM_METRIC = struct.Struct("=IId24x")
_GPM_METRICS_OFFSET = pynvml.c_nvmlGpmMetricsGet_t.metrics.offset


def gpm_values(request: Any, count: int) -> list[float | None]:
    """The value of each of the first `count` metrics of a c_nvmlGpmMetricsGet_t that
    nvmlGpmMetricsGet filled; None where its own return code is not success or the value is
    not a finite number. Unpacked in one call where the layout is the expected one (reading
    each field through pynvml's structures costs a Python call per field)."""
    if ctypes.sizeof(pynvml.c_nvmlGpmMetric_t) == _GPM_METRIC.size:
        raw = ctypes.string_at(
            ctypes.addressof(request) + _GPM_METRICS_OFFSET, _GPM_METRIC.size * count
        )
        entries = [(code, value) for _, code, value in _GPM_METRIC.iter_unpack(raw)]
    else:
        metrics = request.metrics
        entries = [(int(metrics[i].nvmlReturn), float(metrics[i].value)) for i in range(count)]
    return [
        value if code == pynvml.NVML_SUCCESS and math.isfinite(value) else None
        for code, value in entries
    ]
