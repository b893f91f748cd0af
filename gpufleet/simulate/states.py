"""What a simulated GPU is doing: the `State` of one timeline piece, and change points.

A state holds levels (utilization, power, temperature, clocks, throttle bits, processes);
the per-tick noise and counters are added from it in `rows`. A GPU's story before it is
cut into collector ticks is a list of change points: (epoch s, state from then on).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gpufleet.simulate.models import GpuModel


@dataclass(frozen=True)
class Proc:
    pid: int
    user: str
    used_mem_bytes: int
    job_id: str | None


@dataclass(frozen=True, kw_only=True)
class State:
    """What a GPU is doing during one piece of its timeline (levels; noise is added per tick)."""

    util_pct: float = 0.0
    util_amp_pct: float = 0.0
    mem_util_pct: float = 0.0
    mem_util_amp_pct: float = 0.0
    power_w: float
    temp_gpu_c: float
    sm_clock_mhz: int
    sm_clock_amp_mhz: int = 0
    clock_event_mask: int = 0
    thermal: bool = False  # counts toward thermal_violation_ns
    power_capped: bool = False  # counts toward power_violation_ns
    procs: tuple[Proc, ...] = ()
    mem_used_bytes: int
    lost: bool = False  # the GPU fell off the bus: status 'lost', metrics null
    # What share of the utilization keeps the SMs busy (GPM's sm_active_pct over
    # gpu_util_pct), and of SM activity the tensor cores: low for tiny kernels in a loop.
    sm_ratio: float = 0.7
    tensor_ratio: float = 0.4


Points = list[tuple[int, State]]  # change points: (epoch s, the state from then on)


def gpu_state(
    model: GpuModel,
    *,
    hot: bool,
    util: float = 0.0,
    util_amp: float = 0.0,
    mem_util: float = 0.0,
    procs: tuple[Proc, ...] = (),
) -> State:
    """The state of a GPU running `procs` at `util` % (idle with none), in a hot rack or not."""
    load = util / 100.0
    power = model.idle_power_w + (0.92 * model.power_limit_w - model.idle_power_w) * load
    if procs and util == 0.0:
        power += 0.08 * model.idle_power_w  # an idle CUDA context
    ambient, rise = (41.0, 45.0) if hot else (30.0, 36.0)
    mask = 0x1 if util == 0.0 else 0x0  # GPU idle
    capped = power >= 0.88 * model.power_limit_w
    if capped:
        mask |= 0x4  # SW power cap
        power = 0.88 * model.power_limit_w
    busy = util > 0.0
    return State(
        util_pct=util,
        util_amp_pct=util_amp,
        mem_util_pct=mem_util,
        mem_util_amp_pct=min(mem_util, 6.0) if busy else 0.0,
        power_w=power,
        temp_gpu_c=ambient + rise * load + (2.0 if procs else 0.0),
        sm_clock_mhz=model.sm_clock_max_mhz if busy else model.sm_clock_idle_mhz,
        sm_clock_amp_mhz=30 if busy else 0,
        clock_event_mask=mask,
        power_capped=capped,
        procs=procs,
        mem_used_bytes=model.idle_mem_used_bytes + sum(p.used_mem_bytes for p in procs),
    )


def throttled(state: State, *, model: GpuModel, hardware: bool) -> State:
    """The state under a thermal slowdown: hotter, lower clocks, less power."""
    if hardware:
        return replace(
            state,
            clock_event_mask=(state.clock_event_mask & ~0x4) | 0x40 | 0x20 | 0x8,
            thermal=True,
            power_capped=False,
            temp_gpu_c=92.0,
            sm_clock_mhz=_round15(model.sm_clock_max_mhz * 0.5),
            sm_clock_amp_mhz=90,
            power_w=state.power_w * 0.62,
        )
    return replace(
        state,
        clock_event_mask=(state.clock_event_mask & ~0x4) | 0x20,
        thermal=True,
        power_capped=False,
        temp_gpu_c=88.5,
        sm_clock_mhz=_round15(model.sm_clock_max_mhz * 0.78),
        sm_clock_amp_mhz=60,
        power_w=state.power_w * 0.84,
    )


def _round15(mhz: float) -> int:
    return round(mhz / 15.0) * 15


def overlay(points: Points, t0: int, t1: int, transform: Callable[[State], State]) -> Points:
    """Change points with `transform` applied to the states in [t0, t1) (points[0][0] <= t0)."""
    before = [p for p in points if p[0] < t0]
    inside = [p for p in points if t0 <= p[0] < t1]
    after = [p for p in points if p[0] >= t1]
    at_t0 = inside[0][1] if inside and inside[0][0] == t0 else before[-1][1]
    at_t1 = inside[-1][1] if inside else at_t0
    new = [(t0, transform(at_t0))] + [(t, transform(s)) for t, s in inside if t > t0]
    if not after or after[0][0] > t1:
        new.append((t1, at_t1))
    return before + new + after
