"""What the importer asks Prometheus: each contract column's series, reduced over a step,
for a batch of hosts at a time.

A row of the contract covers `(ts - step, ts]`. Prometheus evaluates a range query at
`start, start + step, ...`; the range selector `[step - 1ms]` at `ts` holds the samples in
`(ts - step, ts]` (Prometheus 2 includes both ends of a range, so one millisecond less keeps
a scrape that lands on a step boundary in one step only). Gauges are the mean of those
scrapes, cumulative counters, flags and the clock-event bitmask their last value, as the
collector reads them. A step without a scrape has no point: no row, a gap stays a gap.

`DCGM_FI_DEV_XID_ERRORS` is a gauge of the last XID code seen; a step's XIDs are the codes
its scrapes show that the GPU's series did not show at the end of the step before (`NEW`).

A series with the MIG labels (`GPU_I_ID`, `GPU_I_PROFILE`) describes a MIG device. The
columns of a MIG device's own row (utilization, memory, SM, tensor and DRAM activity) are
grouped by those labels too; the others (power, temperatures, clocks, PCIe and NVLink
traffic, health) are the physical GPU's, grouped without them into its own row, as the
collector writes a MIG-enabled GPU.

When a pod starts or ends, dcgm-exporter's series for a GPU changes its labels (namespace,
pod); the sums and counts of all of a GPU's series in a step are added up before dividing,
so the mean is over every scrape of the step whichever series carried it.

A query covers up to `HOSTS_PER_QUERY` hosts (a regex of their names): Prometheus' work is
about the same for one host or many, but the importer's per request (a connection, an
answer's parse, the Arrow calls that turn it into rows) is paid once for all of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from gpufleet.config import KubernetesConfig, PrometheusConfig

MEAN = "mean"
LAST = "last"
NEW = "new"
XID_LABEL = "gpufleet_xid"  # the label of a code in the answer of a NEW query
# Hosts a query asks about (8 GPUs each: 256 series a query), and the longest regex of their
# names (a URL well under a proxy's 8 KB limit; a longer name is a query of its own).
HOSTS_PER_QUERY = 32
HOSTS_PATTERN_CHARS = 2000
_MIB = 1024 * 1024
_US_TO_NS = 1000
_RATIO_TO_PCT = 100.0


class Metric(NamedTuple):
    column: str  # the key in [prometheus.series]: a contract column or a value that makes one
    reduce: str  # MEAN over the step's scrapes, the LAST one (counters, flags), NEW codes
    scale: float = 1.0  # the exporter's unit to the contract's: MiB -> bytes, us -> ns
    whole: bool = False  # an integer column: the value is rounded
    per_device: bool = False  # a MIG device has its own: grouped by the MIG labels too


METRICS: tuple[Metric, ...] = (
    Metric("gpu_util_pct", MEAN, per_device=True),
    # 0-1; gpu_util_pct where a GPU has no GPU_UTIL (MIG)
    Metric("engine_active_ratio", MEAN, per_device=True),
    Metric("mem_util_pct", MEAN),
    Metric("mem_used_bytes", MEAN, _MIB, whole=True, per_device=True),
    # with used (and reserved): the total
    Metric("mem_free_bytes", MEAN, _MIB, whole=True, per_device=True),
    Metric("mem_reserved_bytes", MEAN, _MIB, whole=True, per_device=True),
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
    # Contract v1.2: DCGM's profiling ratios (0-1) as percentages, its rates in bytes/s.
    Metric("sm_active_pct", MEAN, _RATIO_TO_PCT, per_device=True),
    Metric("sm_occupancy_pct", MEAN, _RATIO_TO_PCT, per_device=True),
    Metric("tensor_active_pct", MEAN, _RATIO_TO_PCT, per_device=True),
    Metric("dram_active_pct", MEAN, _RATIO_TO_PCT, per_device=True),
    Metric("pcie_rx_bytes_s", MEAN),
    Metric("pcie_tx_bytes_s", MEAN),
    Metric("nvlink_rx_bytes_s", MEAN),
    Metric("nvlink_tx_bytes_s", MEAN),
    Metric("xid_errors", NEW),
    Metric("ecc_uncorrected_volatile", LAST, whole=True),
    Metric("ecc_corrected_volatile", LAST, whole=True),
    Metric("remapped_rows_pending", LAST),  # a flag: not 0 is true
    Metric("remapped_rows_failure", LAST),
    Metric("retired_pages_pending", LAST),  # pages pending retirement: more than 0 is true
    Metric("pcie_replay_count", LAST, whole=True),
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


def _row_labels(metric: Metric, prometheus: PrometheusConfig) -> list[str]:
    """The labels that make a row of `metric`: the GPU's, and a MIG device's for its own."""
    labels = _gpu_labels(prometheus)
    if metric.per_device:
        labels += [prometheus.mig_instance_label, prometheus.mig_profile_label]
    return labels


def host_batches(hosts: Sequence[str]) -> Iterator[list[str]]:
    """`hosts` in order, in batches of at most HOSTS_PER_QUERY whose names' regex is at most
    HOSTS_PATTERN_CHARS long (one host, whatever its name's length, is a batch)."""
    batch: list[str] = []
    chars = 0
    for host in hosts:
        length = len(re.escape(host)) + 1
        if batch and (len(batch) == HOSTS_PER_QUERY or chars + length > HOSTS_PATTERN_CHARS):
            yield batch
            batch, chars = [], 0
        batch.append(host)
        chars += length
    if batch:
        yield batch


def host_matcher(hosts: Sequence[str], prometheus: PrometheusConfig) -> str:
    """The matcher of the series of `hosts`: the name of one, a regex of several (each name
    escaped: a name is matched whole, as it is)."""
    if len(hosts) == 1:
        return f"{prometheus.host_label}={promql_string(hosts[0])}"
    pattern = "|".join(re.escape(host) for host in hosts)
    return f"{prometheus.host_label}=~{promql_string(pattern)}"


def step_query(
    metric: Metric, name: str, *, hosts: Sequence[str], prometheus: PrometheusConfig
) -> str:
    """The PromQL of `metric` (series `name`) on `hosts`, per GPU (or MIG device) and step."""
    selector = f"{name}{{{host_matcher(hosts, prometheus)}}}"
    over = selector + _range(prometheus.step_seconds)
    labels = ", ".join(dict.fromkeys(_row_labels(metric, prometheus)))
    by = f"by ({labels})"
    if metric.reduce == MEAN:
        return f"sum {by} (sum_over_time({over})) / sum {by} (count_over_time({over}))"
    if metric.reduce == NEW:
        # Per GPU and step, a series for each code the step's scrapes show (labelled
        # XID_LABEL) unless one of the GPU's series showed it at the end of the step before
        # (the last scrape up to five minutes before, Prometheus' lookback), and a series
        # without XID_LABEL whenever the step has a scrape: the step's list, maybe empty.
        codes = f'count_values {by} ("{XID_LABEL}", last_over_time({over}))'
        before = f'count_values {by} ("{XID_LABEL}", {selector} offset {prometheus.step_seconds}s)'
        return f"({codes} unless {before}) or count {by} (last_over_time({over}))"
    return f"max {by} (last_over_time({over}))"


def pod_query(
    name: str, *, hosts: Sequence[str], prometheus: PrometheusConfig, kubernetes: KubernetesConfig
) -> str:
    """Per GPU (a MIG device: per GPU instance) of `hosts`, pod and step: a point when the
    pod's labels are on the GPU's series `name` in the step."""
    k = kubernetes
    labels = [*_gpu_labels(prometheus), prometheus.mig_instance_label, k.namespace_label]
    labels.append(k.pod_label)
    labels += [label for label in (k.user_label, team_label(k)) if label]
    selector = f'{name}{{{host_matcher(hosts, prometheus)}, {k.pod_label}!=""}}'
    return (
        f"count by ({', '.join(dict.fromkeys(labels))}) "
        f"(count_over_time({selector}{_range(prometheus.step_seconds)}))"
    )


def team_label(kubernetes: KubernetesConfig) -> str:
    """The label that names a pod's team, or "" when the team is its namespace's."""
    return "" if kubernetes.team_from == "namespace" else kubernetes.team_from
