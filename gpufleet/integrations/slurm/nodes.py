"""Slurm's nodes and clusters as gpufleet names them: a node as the collectors write its host
(`HostNames`), the nodes no collector writes samples for (`unmeasured_nodes`, named in one
line as Slurm prints a host list), and a Slurm cluster as its site (`SiteNames`:
`[clusters.<site>] slurm_cluster`, docs/sites.md)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from gpufleet.collectors.schema import folder_host
from gpufleet.config import Config

HOSTS_LOOKBACK = dt.timedelta(days=7)  # collector hosts: those with files in these days


def collector_hosts(config: Config, since: dt.date, until: dt.date) -> set[str]:
    """The hosts with sample files on the UTC days `since` to `until` (raw/samples), by
    name (a site's `host=<host>@<site>` folder names its host)."""
    hosts: set[str] = set()
    day = since
    while day <= until:
        folder = config.samples_dir / f"date={day.isoformat()}"
        if folder.is_dir():
            hosts.update(
                folder_host(p.name[len("host=") :])[0] for p in folder.glob("host=*") if p.is_dir()
            )
        day += dt.timedelta(days=1)
    return hosts


class HostNames:
    """A Slurm node's name as the collectors write it: the same name, else the one host
    whose first label is the node's name (`gpu-node01` -> `gpu-node01.example.org`); a node
    that is neither is kept as it is, and remembered in `unknown`."""

    def __init__(self, hosts: set[str]) -> None:
        self.hosts = hosts
        self.short: dict[str, list[str]] = {}
        for host in sorted(hosts):
            self.short.setdefault(host.split(".")[0], []).append(host)
        self.unknown: set[str] = set()

    def __call__(self, node: str) -> str:
        if node in self.hosts:
            return node
        matches = self.short.get(node, [])
        if len(matches) == 1:
            return matches[0]
        self.unknown.add(node)
        return node


class SiteNames:
    """The site a Slurm cluster's jobs belong to: the site whose `slurm_cluster` is the
    cluster's name, else the cluster's own name (a site named as its ClusterName)."""

    def __init__(self, config: Config) -> None:
        self.sites = {cluster: site for site, cluster in config.slurm_clusters}

    def __call__(self, cluster: str | None) -> str | None:
        return self.sites.get(cluster, cluster) if cluster is not None else None


_NUMBERED = re.compile(r"(.*?)(\d+)")


def compact_hostlist(names: Iterable[str]) -> str:
    """Names as Slurm prints a host list: `gpu01,gpu02,gpu03,cpu1` -> `cpu1,gpu[01-03]`
    (runs of one prefix and digit width collapsed; other names as they are)."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in sorted(set(names)):
        match = _NUMBERED.fullmatch(name)
        if match is None:
            plain.append(name)
            continue
        prefix, digits = match.groups()
        groups.setdefault((prefix, len(digits)), []).append(int(digits))
    pieces = list(plain)
    for (prefix, width), numbers in groups.items():
        if len(numbers) == 1:
            pieces.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        runs: list[list[int]] = []
        for number in sorted(numbers):
            if runs and number == runs[-1][-1] + 1:
                runs[-1].append(number)
            else:
                runs.append([number])
        ranges = [
            f"{run[0]:0{width}d}" + (f"-{run[-1]:0{width}d}" if len(run) > 1 else "")
            for run in runs
        ]
        pieces.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(pieces))
