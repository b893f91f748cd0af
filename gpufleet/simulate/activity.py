"""What a job's processes do to its GPUs: each GPU's change points while they run.

Training holds 84-97 % utilization (throttled in bursts on the hot rack; one job in five
runs tiny kernels in a loop: high utilization, low SM activity), a notebook holds memory at
0 % with short bursts of use, the inference service follows the local day, and dev and
rogue processes run at a steady moderate level.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from dataclasses import replace

import numpy as np

from gpufleet.simulate.jobs import Job
from gpufleet.simulate.models import MIB, GpuModel
from gpufleet.simulate.span import HOUR_S, Span
from gpufleet.simulate.states import Points, Proc, gpu_state, overlay, throttled
from gpufleet.simulate.teams import SERVICE_USER


def job_points(job: Job, *, seed: int, span: Span) -> dict[int, Points]:
    """Each GPU's change points while the job's processes run (the job's own pieces), by
    GPU ordinal."""
    rng = np.random.default_rng([seed, 3, job.serial])
    base_pid = int(rng.integers(2_000, 3_900_000))
    if job.kind in ("train", "owned"):
        return _training(rng, job, base_pid)
    gpu = job.gpus[0]
    if job.kind == "notebook":
        return {gpu.ordinal: _notebook(rng, job, base_pid)}
    if job.kind == "inference":
        return {gpu.ordinal: _inference(rng, job, base_pid, span)}
    return {gpu.ordinal: _steady(rng, job, base_pid)}  # dev and rogue


def _training(rng: np.random.Generator, job: Job, base_pid: int) -> dict[int, Points]:
    host = job.gpus[0].host
    model, hot = host.model, host.hot
    t0, t1 = job.proc_start_s, job.proc_end_s
    mem = int(model.mem_total_bytes * rng.uniform(0.55, 0.93)) // MIB * MIB
    levels: list[tuple[int, float, float]] = []
    t = t0
    while t < t1:
        levels.append((t, float(rng.uniform(84.0, 97.0)), float(rng.uniform(30, 65))))
        t += int(rng.uniform(20, 90) * 60)
    out: dict[int, Points] = {}
    for rank, gpu in enumerate(job.gpus):
        proc = (Proc(base_pid + rank, job.user, mem, job.job_id),)
        points = [
            (t, gpu_state(model, hot=hot, util=u, util_amp=3.0, mem_util=m, procs=proc))
            for t, u, m in levels
        ]
        if hot:
            points = _throttle_runs(rng, points, t1, model)
        out[gpu.ordinal] = points
    return _with_sm_activity(rng, out)


def _with_sm_activity(rng: np.random.Generator, out: dict[int, Points]) -> dict[int, Points]:
    """A training job's SM and tensor activity: most keep 65-85 % of their utilization's
    time on the SMs; one in five is tiny kernels in a loop (busy GPUs, idle SMs)."""
    if rng.random() < 0.2:
        sm, tensor = float(rng.uniform(0.12, 0.25)), float(rng.uniform(0.02, 0.1))
    else:
        sm, tensor = float(rng.uniform(0.65, 0.85)), float(rng.uniform(0.45, 0.7))
    return {
        ordinal: [(t, replace(s, sm_ratio=sm, tensor_ratio=tensor)) for t, s in points]
        for ordinal, points in out.items()
    }


def _throttle_runs(rng: np.random.Generator, points: Points, end_s: int, model: GpuModel) -> Points:
    """Thermal slowdowns of 2-15 minutes about once an hour, some of them hardware ones."""
    t = points[0][0] + int(rng.exponential(60 * 60))
    while t < end_s:
        length = int(rng.uniform(2, 15) * 60)
        hardware = bool(rng.random() < 0.15)
        transform = functools.partial(throttled, model=model, hardware=hardware)
        points = overlay(points, t, min(t + length, end_s), transform)
        t += length + int(rng.exponential(60 * 60)) + 60
    return points


def _notebook(rng: np.random.Generator, job: Job, base_pid: int) -> Points:
    host = job.gpus[0].host
    model, hot = host.model, host.hot
    t0, t1 = job.proc_start_s, job.proc_end_s
    mem = int(model.mem_total_bytes * rng.uniform(0.1, 0.75)) // MIB * MIB
    procs = [Proc(base_pid, job.user, mem, job.job_id)]
    if job.extra_kernel:
        procs.append(Proc(base_pid + 211, job.user, mem // 4, job.job_id))
    held = tuple(procs)
    idle = gpu_state(model, hot=hot, procs=held)
    points = [(t0, idle)]
    t = t0 + int(rng.exponential(2.5 * HOUR_S))
    while t < t1:
        burst = int(rng.uniform(5, 25) * 60)
        util = float(rng.uniform(15, 60))
        busy = gpu_state(model, hot=hot, util=util, util_amp=10.0, mem_util=util / 3, procs=held)
        points += [(t, busy), (t + burst, idle)]
        t += burst + int(rng.exponential(2.5 * HOUR_S)) + 60
    return [(t, s) for t, s in points if t < t1]


def _inference(rng: np.random.Generator, job: Job, base_pid: int, span: Span) -> Points:
    """Hourly levels following the local day (up to the hour after the span's end)."""
    host = job.gpus[0].host
    model, hot = host.model, host.hot
    t0, t1 = job.proc_start_s, job.proc_end_s
    mem = int(model.mem_total_bytes * rng.uniform(0.3, 0.5)) // MIB * MIB
    proc = (Proc(base_pid, SERVICE_USER, mem, job.job_id),)
    points: Points = []
    hour = t0 - t0 % HOUR_S
    last = min(t1, span.end_s + HOUR_S)
    tz = span.tz
    while hour < last:
        local = dt.datetime.fromtimestamp(hour, tz).hour
        daytime = max(0.0, math.sin(math.pi * (local - 7) / 14)) if 7 <= local < 21 else 0
        util = 6.0 + 48.0 * daytime + float(rng.uniform(-3, 3))
        state = gpu_state(model, hot=hot, util=util, util_amp=8.0, mem_util=util / 2, procs=proc)
        points.append((max(hour, t0), state))
        hour += HOUR_S
    return points


def _steady(rng: np.random.Generator, job: Job, base_pid: int) -> Points:
    host = job.gpus[0].host
    mem = int(host.model.mem_total_bytes * rng.uniform(0.1, 0.5)) // MIB * MIB
    util = float(rng.uniform(30, 72))
    proc = (Proc(base_pid, job.user, mem, job.job_id),)
    state = gpu_state(
        host.model, hot=host.hot, util=util, util_amp=12.0, mem_util=util / 2, procs=proc
    )
    return [(job.proc_start_s, state)]
