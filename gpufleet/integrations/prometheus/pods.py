"""Pods as allocations: dcgm-exporter puts a pod's `namespace` and `pod` labels on the series
of each GPU the pod holds (absent while no pod does). A pod that holds a GPU over a run of
steps becomes one allocation row, `namespace/pod` on that host and GPU index, from the start
of its first step to the end of its last; a step in which the GPU was scraped without the
pod ends the run, a step with no scrape at all (a gap) does not. A pod on a MIG device
holds that device alone: its row names the device's UUID as the imported samples do
(`MIG-<GPU's UUID>/<GPU instance>`, samples.py), so that pods on two slices of one GPU are
two jobs, each with its own slice.

The team: the value of the `[kubernetes] team_from` label when that names a label the series
carry, else the namespace's team in ref/namespaces.csv (`namespace,team[,valid_from]`),
else the namespace itself. The user: the `[kubernetes] user_label` label, else none.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.prometheus.points import point_times
from gpufleet.integrations.prometheus.queries import team_label
from gpufleet.integrations.prometheus.samples import gpu_of, label, labels_of
from gpufleet.integrations.refmap import read_team_rows, team_on

NAMESPACES_FILE = "namespaces.csv"
_NAMESPACES_COLUMNS = ("namespace", "team")


class NamespaceTeam(NamedTuple):
    namespace: str
    team: str
    valid_from: dt.date | None  # the row applies from this local date on; None: always


class PodAllocation(NamedTuple):
    """One row of raw/allocations/*.csv."""

    job_id: str  # namespace/pod
    user: str | None
    team: str
    host: str
    gpu_index: int
    start_ts: dt.datetime
    end_ts: dt.datetime
    cluster: str | None = None  # the site the import writes into samples; None: none
    gpu_uuid: str | None = None  # the MIG device it holds; None: the GPU of gpu_index


def read_namespaces(path: Path) -> tuple[NamespaceTeam, ...]:
    """ref/namespaces.csv; a missing file is no rows. A namespace may be listed once per
    `valid_from` (and once without)."""
    rows = read_team_rows(
        path,
        key="namespace",
        where=str(path),
        check_header=lambda line, header: _check_header(path, line, header),
    )
    return tuple(NamespaceTeam(*row) for row in rows)


def _check_header(path: Path, line: int, header: list[str]) -> None:
    expected = "namespace,team[,valid_from]"
    for name in header:
        if name not in (*_NAMESPACES_COLUMNS, "valid_from"):
            raise GpufleetError(
                f"{path}: line {line}: unknown column '{name}' (expected {expected})"
            )
    for name in _NAMESPACES_COLUMNS:
        if header.count(name) != 1:
            raise GpufleetError(f"{path}: line {line}: needs one column '{name}' ({expected})")


def namespace_team(namespace: str, day: dt.date, rows: Iterable[NamespaceTeam]) -> str | None:
    """The team of `namespace` on local date `day`: the row with the latest `valid_from` on
    or before it, else the row without one."""
    return team_on(((r.team, r.valid_from) for r in rows if r.namespace == namespace), day)


@dataclass
class _PodOnGpu:
    steps: set[int] = field(default_factory=set)
    user: str | None = None
    team: str | None = None


def pod_allocations(
    answers: Iterable[tuple[str, list[dict[str, Any]]]],
    *,
    config: Config,
    namespaces: tuple[NamespaceTeam, ...],
) -> list[PodAllocation]:
    """The allocation rows of the pod queries' answers ((query, series) pairs) of one
    window."""
    prometheus, kubernetes = config.prometheus, config.kubernetes
    step_us = prometheus.step_seconds * 1_000_000
    pods: dict[tuple[str, str, str, int, str], _PodOnGpu] = {}
    for query, answer in answers:
        for series in answer:
            gpu = gpu_of(series, prometheus=prometheus, query=query)
            namespace = label(series, kubernetes.namespace_label, query=query)
            pod = label(series, kubernetes.pod_label, query=query)
            labels = labels_of(series, query=query)
            device = gpu.uuid if gpu.parent is not None else ""  # a MIG device's own UUID
            found = pods.setdefault((namespace, pod, gpu.host, gpu.index, device), _PodOnGpu())
            found.steps.update(round(t * 1000) * 1000 for t in point_times(series, query=query))
            found.user = found.user or labels.get(kubernetes.user_label) or None
            found.team = found.team or labels.get(team_label(kubernetes)) or None
    # a namespace's dated row applies from local midnight at the site the import writes
    zone = zoneinfo.ZoneInfo(config.site_timezone(config.prometheus.cluster or config.cluster))
    rows: list[PodAllocation] = []
    for (namespace, pod, host, index, device), found in sorted(pods.items()):
        for first, last in _runs(sorted(found.steps), step_us):
            start = dt.datetime.fromtimestamp((first - step_us) / 1e6, tz=dt.UTC)
            team = (
                found.team
                or namespace_team(namespace, start.astimezone(zone).date(), namespaces)
                or namespace
            )
            end = dt.datetime.fromtimestamp(last / 1e6, tz=dt.UTC)
            rows.append(
                PodAllocation(
                    f"{namespace}/{pod}",
                    found.user,
                    team,
                    host,
                    index,
                    start,
                    end,
                    gpu_uuid=device or None,
                )
            )
    return rows


def _runs(steps: list[int], step_us: int) -> list[tuple[int, int]]:
    """(first, last) of each run of consecutive steps in sorted `steps`."""
    runs: list[tuple[int, int]] = []
    for ts in steps:
        if runs and ts - runs[-1][1] == step_us:
            runs[-1] = (runs[-1][0], ts)
        else:
            runs.append((ts, ts))
    return runs
