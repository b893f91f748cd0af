"""The fleet's layout: hosts in racks, their kind and owner, their GPUs and each GPU's role.

Host kinds come in fixed fractions of the fleet (shared training hosts, interactive hosts,
spares, team-owned A100 hosts); one rack runs hot. `hosts.csv` is written from the owners.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.simulate.models import A100, H100, L40S, GpuModel
from gpufleet.simulate.teams import OWNER_TEAMS

RACK_SIZE = 4  # hosts per rack


@dataclass(frozen=True, kw_only=True)
class HostPlan:
    index: int
    name: str
    rack: int  # 1-based
    kind: str  # mixed, training, interactive, spare, owned
    owner_team: str | None
    model: GpuModel
    gpu_count: int
    phase_us: int  # the collector's tick offset within the interval
    hot: bool  # in the hot rack


@dataclass(frozen=True, kw_only=True)
class GpuPlan:
    ordinal: int  # position in Scenario.gpus (hosts in order, GPUs by uuid)
    host: HostPlan
    index: int
    uuid: str
    role: str  # train, notebook, rogue, spare, inference, dev, owned_train, owned_idle
    noise_key: int


def plan_layout(
    *, seed: int, gpus: int, gpus_per_host: int, interval_us: int
) -> tuple[list[HostPlan], list[GpuPlan]]:
    """The hosts in order, and their GPUs (hosts in order, each host's GPUs by uuid)."""
    rng = np.random.default_rng([seed, 1])
    kinds = host_kinds(math.ceil(gpus / gpus_per_host))
    hosts = _hosts(rng, kinds, gpus=gpus, gpus_per_host=gpus_per_host, interval_us=interval_us)
    return hosts, _gpus(rng, hosts)


def host_kinds(n_hosts: int) -> list[str]:
    """Host kinds in host order, in fixed fractions of the fleet (at least one of each)."""
    if n_hosts == 1:
        return ["mixed"]
    owned = max(1, round(0.15 * n_hosts))
    shared = n_hosts - owned
    spare = round(0.07 * shared) if shared >= 4 else 0
    interactive = round(0.2 * shared) if shared >= 3 else 0
    mixed = max(1, round(0.1 * shared))
    training = shared - spare - interactive - mixed
    return (
        ["mixed"] * mixed
        + ["training"] * training
        + ["interactive"] * interactive
        + ["spare"] * spare
        + ["owned"] * owned
    )


def gpu_roles(kind: str, n: int) -> list[str]:
    """Roles of a host's GPUs by index."""
    if kind == "training":
        return ["train"] * n
    if kind == "spare":
        return ["spare"] * n
    if kind == "owned":
        idle = max(1, n // 4) if n >= 2 else 0
        return ["owned_train"] * (n - idle) + ["owned_idle"] * idle
    if kind == "interactive":
        notebooks = max(1, math.ceil(n / 2))
        inference = max(0, min(n - notebooks, max(1, n // 4)))
        return (
            ["notebook"] * notebooks
            + ["inference"] * inference
            + ["dev"] * (n - notebooks - inference)
        )
    # mixed: a bit of everything
    spare = 1 if n >= 3 else 0
    rogue = 1 if n >= 4 else 0
    notebook = max(1, round(n * 0.25)) if n >= 2 else 0
    train = n - spare - rogue - notebook
    return ["train"] * train + ["notebook"] * notebook + ["rogue"] * rogue + ["spare"] * spare


def host_name(index: int) -> str:
    return f"gpu-r{index // RACK_SIZE + 1:02d}n{index % RACK_SIZE + 1:02d}"


def host_rules(hosts: Sequence[HostPlan]) -> list[tuple[str, str]]:
    """hosts.csv rows: a rack glob where a team owns every host of a rack, else host names."""
    rules: list[tuple[str, str]] = []
    by_rack: dict[int, list[HostPlan]] = {}
    for host in hosts:
        by_rack.setdefault(host.rack, []).append(host)
    for rack, members in by_rack.items():
        owners = {h.owner_team for h in members}
        if len(members) == RACK_SIZE and len(owners) == 1 and None not in owners:
            rules.append((f"gpu-r{rack:02d}n*", str(members[0].owner_team)))
            continue
        rules.extend((h.name, h.owner_team) for h in members if h.owner_team)
    return rules


def _hot_rack(kinds: Sequence[str]) -> int:
    """The rack of the middle busy host (the first rack in a fleet with no training host)."""
    busy = [i for i, k in enumerate(kinds) if k == "mixed"]
    busy += [i for i, k in enumerate(kinds) if k == "training"]
    return (busy[len(busy) // 2] if "training" in kinds else 0) // RACK_SIZE + 1


def _hosts(
    rng: np.random.Generator,
    kinds: Sequence[str],
    *,
    gpus: int,
    gpus_per_host: int,
    interval_us: int,
) -> list[HostPlan]:
    hot_rack = _hot_rack(kinds)
    owned = [i for i, k in enumerate(kinds) if k == "owned"]
    research_hosts = max(1, round(0.6 * len(owned)))
    hosts: list[HostPlan] = []
    for i, kind in enumerate(kinds):
        owner = None
        if kind == "owned":
            owner = OWNER_TEAMS[0] if owned.index(i) < research_hosts else OWNER_TEAMS[1]
        phase_ms = int(rng.integers(0, max(1, interval_us // 1000)))
        hosts.append(
            HostPlan(
                index=i,
                name=host_name(i),
                rack=i // RACK_SIZE + 1,
                kind=kind,
                owner_team=owner,
                model={"owned": A100, "interactive": L40S}.get(kind, H100),
                gpu_count=min(gpus_per_host, gpus - i * gpus_per_host),
                phase_us=phase_ms * 1000,
                hot=i // RACK_SIZE + 1 == hot_rack,
            )
        )
    return hosts


def _gpus(rng: np.random.Generator, hosts: Sequence[HostPlan]) -> list[GpuPlan]:
    gpus: list[GpuPlan] = []
    for host in hosts:
        roles = gpu_roles(host.kind, host.gpu_count)
        entries = sorted((_uuid(rng), index, role) for index, role in enumerate(roles))
        for uuid, index, role in entries:
            key = int(rng.integers(0, 2**62))
            gpus.append(
                GpuPlan(
                    ordinal=len(gpus), host=host, index=index, uuid=uuid, role=role, noise_key=key
                )
            )
    return gpus


def _uuid(rng: np.random.Generator) -> str:
    parts = rng.integers(0, 2**32, size=4, dtype=np.uint64)
    hexes = "".join(f"{int(p):08x}" for p in parts)
    return f"GPU-{hexes[:8]}-{hexes[8:12]}-{hexes[12:16]}-{hexes[16:20]}-{hexes[20:32]}"
