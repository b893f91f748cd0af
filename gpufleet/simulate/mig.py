"""MIG (`gpufleet simulate --mig`): which H100 GPUs are split into MIG devices, and what
runs on each.

Half the GPUs of spare H100 hosts and the spare GPU of a mixed host are MIG-enabled: split
into 3g.40gb + 4g.40gb or into seven 1g.10gb devices, in turn. Each device but the last
1g.10gb one runs one user's process at a steady SM activity for the whole span, in a job
that holds that device alone: an allocation row naming the device by its UUID
(`mig_allocation_rows`), as a Kubernetes pod on a MIG device is. The GPU's own row draws
the power of their load (`timelines`), and `rows` writes a row per device at each of its
GPU's ticks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.simulate.jobs import AllocationRow
from gpufleet.simulate.layout import GpuPlan
from gpufleet.simulate.models import MIB
from gpufleet.simulate.span import Span

MIG_SLICES = 7  # an H100's GPU instance slices
PROFILES = {"1g.10gb": (1, 9856 * MIB), "3g.40gb": (3, 40192 * MIB), "4g.40gb": (4, 40192 * MIB)}
SPLITS = (("3g.40gb", "4g.40gb"), ("1g.10gb",) * 7)


@dataclass(frozen=True, kw_only=True)
class MigDevice:
    uuid: str  # MIG-...
    profile: str
    slices: int
    mem_total_bytes: int
    user: str | None  # the user whose process runs on it; None: no process
    pid: int
    mem_used_bytes: int
    sm_active_pct: float  # the level; `rows` adds per-tick noise
    noise_key: int

    @property
    def slice_fraction(self) -> float:
        return self.slices / MIG_SLICES


MigPlan = dict[int, tuple[MigDevice, ...]]  # the MIG devices of each MIG GPU, by ordinal


def mig_parents(gpus: Sequence[GpuPlan]) -> list[GpuPlan]:
    """The MIG-enabled GPUs: the first half of a spare H100 host's, a mixed host's spare."""
    return [
        g
        for g in gpus
        if g.host.model.has_gpm
        and g.role == "spare"
        and (g.host.kind != "spare" or g.index < max(1, g.host.gpu_count // 2))
    ]


def plan_mig(gpus: Sequence[GpuPlan], user_names: Sequence[str], *, seed: int) -> MigPlan:
    """Each MIG GPU's devices, drawn from the seed."""
    plan: MigPlan = {}
    for number, gpu in enumerate(mig_parents(gpus)):
        rng = np.random.default_rng([seed, 9, gpu.ordinal])
        split = SPLITS[number % len(SPLITS)]
        devices = []
        for k, profile in enumerate(split):
            slices, mem_total = PROFILES[profile]
            busy = not (len(split) > 2 and k == len(split) - 1)
            user = str(rng.choice(list(user_names))) if busy and user_names else None
            used = int(mem_total * rng.uniform(0.3, 0.9)) // MIB * MIB if user else 0
            devices.append(
                MigDevice(
                    uuid=_mig_uuid(gpu.uuid, k),
                    profile=profile,
                    slices=slices,
                    mem_total_bytes=mem_total,
                    user=user,
                    pid=int(rng.integers(2_000, 3_900_000)),
                    mem_used_bytes=used,
                    sm_active_pct=float(rng.uniform(20, 75)) if user else 0.0,
                    noise_key=int(rng.integers(0, 2**62)),
                )
            )
        plan[gpu.ordinal] = tuple(devices)
    return plan


def mig_allocation_rows(gpus: Sequence[GpuPlan], plan: MigPlan, span: Span) -> list[AllocationRow]:
    """An allocation row per busy MIG device, its user's over the whole span (still running
    at its end), naming the device by UUID; team empty: the user's in users.csv."""
    return [
        AllocationRow(
            job_id=f"mig/{gpu.host.name}-{gpu.index}-{k}",
            user=device.user,
            team="",
            host=gpu.host.name,
            gpu_index=gpu.index,
            start_s=span.start_s,
            end_s=None,
            gpu_uuid=device.uuid,
        )
        for gpu in gpus
        for k, device in enumerate(plan.get(gpu.ordinal, ()))
        if device.user is not None
    ]


def parent_load(devices: Sequence[MigDevice]) -> float:
    """The utilization whose power a MIG GPU draws: its devices' activity by their slices."""
    return sum(min(100.0, d.sm_active_pct * 1.3) * d.slice_fraction for d in devices)


def _mig_uuid(parent_uuid: str, k: int) -> str:
    h = hashlib.sha256(f"{parent_uuid}/{k}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
