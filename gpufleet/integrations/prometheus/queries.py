"""What the importer asks Prometheus: each contract column's series, reduced over a step.

A row of the contract covers `(ts - step, ts]`. Prometheus evaluates a range query at
`start, start + step, ...`; the range selector `[step - 1ms]` at `ts` holds the samples in
`(ts - step, ts]` (Prometheus 2 includes both ends of a range, so one millisecond less keeps
a scrape that lands on a step boundary in one step only). Gauges are the mean of those
scrapes, cumulative counters and the clock-event bitmask their last value, as the collector
reads them. A step without a scrape has no point: no row, a gap stays a gap.

When a pod starts or ends, dcgm-exporter's series for a GPU changes its labels (namespace,
pod); the sums and counts of all of a GPU's series in a step are added up before dividing,
so the mean is over every scrape of the step whichever series carried it.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from gpufleet.config_sources import KubernetesConfig, PrometheusConfig

MEAN = "mean"
LAST = "last"
_MIB = 1024 * 1024
_US_TO_NS = 1000


class Metric(NamedTuple):
    column: str  # the key in [prometheus.series]: a contract column or a value that makes one
    reduce: str  # MEAN over the step's scrapes, or the LAST one (counters, bitmasks)
    scale: float = 1.0  # the exporter's unit to the contract's: MiB -> bytes, us -> ns
    whole: bool = False  # an integer column: the value is rounded


METRICS: tuple[Metric, ...] = (
    Metric("gpu_util_pct", MEAN),
    Metric("engine_active_ratio", MEAN),  # 0-1; gpu_util_pct where a GPU has no GPU_UTIL (MIG)
    Metric("mem_util_pct", MEAN),
    Metric("mem_used_bytes", MEAN, _MIB, whole=True),
    Metric("mem_free_bytes", MEAN, _MIB, whole=True),  # with used (and reserved): the total
    Metric("mem_reserved_bytes", MEAN, _MIB, whole=True),
    Metric("power_w", MEAN),
    Metric("power_limit_w", MEAN),
    Metric("energy_mj", LAST, whole=True),
    Metric("temp_gpu_c", MEAN, whole=True),
    Metric("temp_mem_c", MEAN, whole=True),
    Metric("sm_clock_mhz", MEAN, whole=True),
    Metric("mem_clock_mhz", MEAN, whole=True),
    Metric("clock_event_mask", LAST, whole=True),
    Metric("thermal_violation_ns", LAST, _US_TO_NS, whole=True),  # DCGM counts microseconds
    Metric("power_violation_ns", LAST, _US_TO_NS, whole=True),
)

# The series whose presence says that a pod holds a GPU in a step.
PRESENCE_COLUMN = "gpu_util_pct"


def promql_string(value: str) -> str:
    """`value` as a PromQL string literal (double-quoted, Go escapes)."""
    return json.dumps(value)


def name_matcher(names: list[str]) -> str:
    """A selector of every series named in `names`."""
    return "{__name__=~" + promql_string("|".join(sorted(names))) + "}"


def _range(step_s: int) -> str:
    return f"[{step_s * 1000 - 1}ms]"


def _gpu_labels(prometheus: PrometheusConfig) -> list[str]:
    p = prometheus
    return [p.host_label, p.uuid_label, p.gpu_label, p.model_label]


def step_query(metric: Metric, name: str, *, host: str, prometheus: PrometheusConfig) -> str:
    """The PromQL of `metric` (series `name`) on `host`, per GPU and step."""
    selector = f"{name}{{{prometheus.host_label}={promql_string(host)}}}"
    over = selector + _range(prometheus.step_seconds)
    by = f"by ({', '.join(_gpu_labels(prometheus))})"
    if metric.reduce == MEAN:
        return f"sum {by} (sum_over_time({over})) / sum {by} (count_over_time({over}))"
    return f"max {by} (last_over_time({over}))"


def pod_query(
    name: str, *, host: str, prometheus: PrometheusConfig, kubernetes: KubernetesConfig
) -> str:
    """Per GPU of `host`, pod and step: a point when the pod's labels are on the GPU's
    series `name` in the step."""
    k = kubernetes
    labels = [*_gpu_labels(prometheus), k.namespace_label, k.pod_label]
    labels += [label for label in (k.user_label, team_label(k)) if label]
    selector = f'{name}{{{prometheus.host_label}={promql_string(host)}, {k.pod_label}!=""}}'
    return (
        f"count by ({', '.join(dict.fromkeys(labels))}) "
        f"(count_over_time({selector}{_range(prometheus.step_seconds)}))"
    )


def team_label(kubernetes: KubernetesConfig) -> str:
    """The label that names a pod's team, or "" when the team is its namespace's."""
    return "" if kubernetes.team_from == "namespace" else kubernetes.team_from
