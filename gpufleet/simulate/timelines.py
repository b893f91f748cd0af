"""Every GPU's timeline on the collector's tick grid, as numpy arrays `rows` can index.

A timeline is a list of pieces, each a constant `State` from one tick to the next piece,
with the counters' values where the piece begins (energy since the driver loaded, thermal
and power violation time), so the counters at any tick follow from its piece alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from gpufleet.simulate.activity import job_points
from gpufleet.simulate.events import Events, with_events
from gpufleet.simulate.jobs import Job
from gpufleet.simulate.layout import GpuPlan
from gpufleet.simulate.mig import MigDevice, MigPlan, parent_load
from gpufleet.simulate.noise import NOISE_POWER, unit_noise
from gpufleet.simulate.span import DAY_S, HOUR_S, Span, first_tick
from gpufleet.simulate.states import Points, Proc, State, gpu_state

Pieces = list[tuple[int, State]]  # (first tick, state) of each piece of one GPU, in order


@dataclass(kw_only=True)
class Timelines:
    """All GPUs' pieces, concatenated in Scenario.gpus order (numpy arrays, one per field)."""

    offsets: np.ndarray  # int64, len(gpus) + 1
    start_tick: np.ndarray  # int64, the first tick of each piece
    util_pct: np.ndarray
    util_amp_pct: np.ndarray
    mem_util_pct: np.ndarray
    mem_util_amp_pct: np.ndarray
    power_w: np.ndarray
    temp_gpu_c: np.ndarray
    sm_clock_mhz: np.ndarray
    sm_clock_amp_mhz: np.ndarray
    clock_event_mask: np.ndarray  # uint64
    lost: np.ndarray  # bool
    sm_ratio: np.ndarray
    tensor_ratio: np.ndarray
    mem_used_bytes: np.ndarray  # int64
    energy_base_mj: np.ndarray  # float64: energy(k) = base + 1000*iv*(P*(k - start) + A*h(k))
    thermal_base_ns: np.ndarray  # int64: value at the tick before the piece
    thermal_flag: np.ndarray  # int64 0/1
    power_viol_base_ns: np.ndarray
    power_viol_flag: np.ndarray
    proc_start: np.ndarray  # int64 into the process table
    proc_count: np.ndarray  # int64
    # The process table.
    proc_pid: np.ndarray  # uint32
    proc_user: np.ndarray  # int32 into users
    proc_mem_bytes: np.ndarray  # int64
    proc_job: np.ndarray  # int32 into job_ids, -1 = none
    proc_users: list[str] = field(default_factory=list)
    proc_job_ids: list[str] = field(default_factory=list)


def build_timelines(
    jobs: Sequence[Job],
    gpus: Sequence[GpuPlan],
    events: Events,
    *,
    seed: int,
    span: Span,
    mig: MigPlan | None = None,
) -> Timelines:
    """Cut every GPU's change points (idle, its jobs, the events) into pieces on its ticks,
    frozen at the span's end: the last state goes on and nothing new starts. A MIG GPU
    (`mig`) holds its devices' memory and draws their load's power all along."""
    per_gpu = _job_change_points(jobs, gpus, seed=seed, span=span)
    pieces: Pieces = []
    bases: list[tuple[float, int, int]] = []
    offsets = [0]
    for gpu in gpus:
        idle = gpu_state(gpu.host.model, hot=gpu.host.hot)
        if mig and gpu.ordinal in mig:
            idle = _mig_state(gpu, mig[gpu.ordinal])
        points = with_events([(span.horizon_s, idle), *per_gpu[gpu.ordinal]], gpu, events)
        mine = _on_ticks([p for p in points if p[0] < span.end_s], gpu, span.interval_us)
        reset = None
        if gpu.host.name == events.reload_host:
            reset = first_tick(events.reload_s, gpu.host.phase_us, span.interval_us)
        bases += _counter_bases(mine, gpu, reset, seed=seed, interval_us=span.interval_us)
        pieces += mine
        offsets.append(len(pieces))
    return _arrays(pieces, bases, offsets)


def _mig_state(gpu: GpuPlan, devices: Sequence[MigDevice]) -> State:
    """A MIG GPU's own state: its devices' load and memory, no process of its own."""
    state = gpu_state(gpu.host.model, hot=gpu.host.hot, util=parent_load(devices))
    used = sum(d.mem_used_bytes for d in devices)
    return replace(state, mem_used_bytes=state.mem_used_bytes + used)


def _job_change_points(
    jobs: Sequence[Job], gpus: Sequence[GpuPlan], *, seed: int, span: Span
) -> dict[int, Points]:
    """Each GPU's change points from its jobs, by ordinal: the job's own, then idle after."""
    per_gpu: dict[int, Points] = {g.ordinal: [] for g in gpus}
    for job in sorted(jobs, key=lambda j: j.proc_start_s):
        for ordinal, points in job_points(job, seed=seed, span=span).items():
            per_gpu[ordinal].extend(points)
            idle = gpu_state(gpus[ordinal].host.model, hot=gpus[ordinal].host.hot)
            per_gpu[ordinal].append((job.proc_end_s, idle))
    return per_gpu


def _on_ticks(points: Points, gpu: GpuPlan, interval_us: int) -> Pieces:
    """Change points moved to the first tick at or after them; on a shared tick the later
    point wins."""
    pieces: Pieces = []
    for t, state in points:
        k = first_tick(t, gpu.host.phase_us, interval_us)
        if pieces and pieces[-1][0] >= k:
            pieces[-1] = (pieces[-1][0], state)
        else:
            pieces.append((k, state))
    return pieces


def _counter_bases(
    pieces: Pieces, gpu: GpuPlan, reset: int | None, *, seed: int, interval_us: int
) -> list[tuple[float, int, int]]:
    """(energy mJ, thermal violation ns, power violation ns) where each piece begins.

    The counters start where a random uptime left them and restart at ~0 at `reset`, the
    tick of a driver reload; energy is kept in the form `rows` adds its per-tick noise to.
    """
    rng = np.random.default_rng([seed, 4, gpu.ordinal])
    model = gpu.host.model
    uptime_s = float(rng.uniform(2, 40)) * DAY_S
    amp = model.power_noise_w
    iv_s = interval_us / 1e6
    iv_ns = interval_us * 1000
    starts = np.array([k for k, _ in pieces], dtype=np.int64)
    h_before = unit_noise(np.array([gpu.noise_key], dtype=np.uint64), starts - 1, NOISE_POWER)
    e0 = uptime_s * 250.0 * 1000.0  # mJ since the driver loaded
    therm0 = int(rng.uniform(0, 3 * HOUR_S)) * 10**9 if gpu.host.hot else 0
    pviol0 = int(rng.uniform(0, HOUR_S)) * 10**9
    cum_p = 0.0
    cum_t = 0
    cum_v = 0
    epoch_h = h_before[0]
    bases: list[tuple[float, int, int]] = []
    for j, (k, state) in enumerate(pieces):
        if k == reset:
            e0, therm0, pviol0 = 0.0, 0, 0
            cum_p, cum_t, cum_v = 0.0, 0, 0
            epoch_h = h_before[j]
        energy = e0 + 1000.0 * iv_s * (cum_p + state.power_w - amp * epoch_h)
        bases.append((energy, therm0 + iv_ns * cum_t, pviol0 + iv_ns * cum_v))
        length = (pieces[j + 1][0] - k) if j + 1 < len(pieces) else 0
        cum_p += state.power_w * length
        cum_t += length * state.thermal
        cum_v += length * state.power_capped
    return bases


def _arrays(pieces: Pieces, bases: list[tuple[float, int, int]], offsets: list[int]) -> Timelines:
    states = [state for _, state in pieces]
    procs: list[Proc] = [p for s in states for p in s.procs]
    proc_count = np.array([len(s.procs) for s in states], dtype=np.int64)
    users = sorted({p.user for p in procs})
    user_index = {u: i for i, u in enumerate(users)}
    job_ids = sorted({p.job_id for p in procs if p.job_id is not None})
    job_index = {j: i for i, j in enumerate(job_ids)}

    def column(name: str, dtype: npt.DTypeLike) -> np.ndarray:
        return np.array([getattr(s, name) for s in states], dtype=dtype)

    return Timelines(
        offsets=np.array(offsets, dtype=np.int64),
        start_tick=np.array([k for k, _ in pieces], dtype=np.int64),
        util_pct=column("util_pct", np.float64),
        util_amp_pct=column("util_amp_pct", np.float64),
        mem_util_pct=column("mem_util_pct", np.float64),
        mem_util_amp_pct=column("mem_util_amp_pct", np.float64),
        power_w=column("power_w", np.float64),
        temp_gpu_c=column("temp_gpu_c", np.float64),
        sm_clock_mhz=column("sm_clock_mhz", np.int64),
        sm_clock_amp_mhz=column("sm_clock_amp_mhz", np.int64),
        clock_event_mask=column("clock_event_mask", np.uint64),
        lost=column("lost", np.bool_),
        sm_ratio=column("sm_ratio", np.float64),
        tensor_ratio=column("tensor_ratio", np.float64),
        mem_used_bytes=column("mem_used_bytes", np.int64),
        energy_base_mj=np.array([e for e, _, _ in bases], dtype=np.float64),
        thermal_base_ns=np.array([t for _, t, _ in bases], dtype=np.int64),
        thermal_flag=column("thermal", np.int64),
        power_viol_base_ns=np.array([v for _, _, v in bases], dtype=np.int64),
        power_viol_flag=column("power_capped", np.int64),
        proc_start=np.cumsum(proc_count) - proc_count,
        proc_count=proc_count,
        proc_pid=np.array([p.pid for p in procs], dtype=np.uint32),
        proc_user=np.array([user_index[p.user] for p in procs], dtype=np.int32),
        proc_mem_bytes=np.array([p.used_mem_bytes for p in procs], dtype=np.int64),
        proc_job=np.array(
            [job_index[p.job_id] if p.job_id is not None else -1 for p in procs], dtype=np.int32
        ),
        proc_users=users,
        proc_job_ids=job_ids,
    )
