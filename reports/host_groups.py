"""Where the week's throttled GPUs are: the host, or the group of hosts named alike (a rack,
`gpu-r02n*`), that holds most of them, so the report can say "look at that rack".

A host's group is its name less the digits it ends with (`gpu-r02n01` is in `gpu-r02n*`, as
racks are usually named); a group that holds every host of the fleet (`node*`) says
nothing and is not named.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

import polars as pl

MIN_THROTTLED_GPUS = 2  # fewer throttled GPUs than this need no group: the table shows them
_TRAILING_DIGITS = re.compile(r"[0-9]+$")


class HostGroup(NamedTuple):
    name: str  # a host's name, or a glob of its group (`gpu-r02n*`), with `@site` where it has one
    hosts: int  # the group's hosts that throttled
    gpus_throttled: int  # the throttled GPUs on them
    all_gpus_throttled: int  # the week's throttled GPUs, on every host
    is_host: bool  # one host, not a group


def _label(name: str, cluster: str | None) -> str:
    return name if cluster is None else f"{name}@{cluster}"


def _groups(cluster: str | None, host: str) -> Iterable[tuple[str | None, str, bool]]:
    """The host itself, and the group of hosts named like it (if its name ends in digits)."""
    yield cluster, host, True
    prefix = _TRAILING_DIGITS.sub("", host)
    if prefix and prefix != host:
        yield cluster, prefix + "*", False


def throttled_group(throttled: pl.DataFrame, fleet_hosts: pl.DataFrame) -> HostGroup | None:
    """The host or group of hosts with more than half of the week's throttled GPUs (the one
    with the most; a host before its group on a tie), or None when none has.

    `throttled` has a row per host that throttled (`cluster`, `host`, `gpus_throttled`);
    `fleet_hosts` a row per host of the fleet's week (`cluster`, `host`)."""
    total = int(throttled["gpus_throttled"].sum() or 0) if not throttled.is_empty() else 0
    if total < MIN_THROTTLED_GPUS:
        return None
    gpus: dict[tuple[str | None, str, bool], int] = {}
    hosts: dict[tuple[str | None, str, bool], int] = {}
    for row in throttled.iter_rows(named=True):
        for key in _groups(row["cluster"], row["host"]):
            gpus[key] = gpus.get(key, 0) + int(row["gpus_throttled"])
            hosts[key] = hosts.get(key, 0) + 1
    members: dict[tuple[str | None, str, bool], int] = {}
    for row in fleet_hosts.unique(["cluster", "host"]).iter_rows(named=True):
        for key in _groups(row["cluster"], row["host"]):
            members[key] = members.get(key, 0) + 1
    fleet_size = fleet_hosts.unique(["cluster", "host"]).height
    candidates = [
        key
        for key, count in gpus.items()
        if 2 * count > total and (key[2] or members.get(key, hosts[key]) < fleet_size)
    ]
    if not candidates:
        return None
    cluster, name, is_host = max(candidates, key=lambda key: (gpus[key], key[2]))
    key = (cluster, name, is_host)
    return HostGroup(
        name=_label(name, cluster),
        hosts=hosts[key],
        gpus_throttled=gpus[key],
        all_gpus_throttled=total,
        is_host=is_host,
    )
