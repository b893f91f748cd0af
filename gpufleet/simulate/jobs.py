"""The scheduler's story: which jobs run on which GPUs when, for whom, and their allocations.

Each host draws its jobs from its own random stream, by GPU role: training streams (shared
or a team's own), Jupyter notebooks held for hours, a rogue user's processes with no
allocation, an inference service, short dev sessions. Slurm numbers the allocated jobs in
submission order; the allocations that overlap the span become `AllocationRow`s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpufleet.simulate.events import Events, blackouts
from gpufleet.simulate.layout import GpuPlan, HostPlan
from gpufleet.simulate.span import DAY_S, HOUR_S, Span
from gpufleet.simulate.teams import (
    EXTERNAL_USER,
    ROGUE_UNMAPPED_USER,
    SERVICE_USER,
    TEAMS,
    TRAINING_TEAMS,
    TRAINING_WEIGHTS,
)


@dataclass(frozen=True, kw_only=True)
class Job:
    kind: str  # train, owned, notebook, rogue, inference, dev
    gpus: tuple[GpuPlan, ...]
    start_s: int  # allocation (or, with no allocation, the process) start
    end_s: int
    proc_start_s: int
    proc_end_s: int
    user: str
    team_field: str  # the allocation's team; "" = look the user up in users.csv
    allocated: bool
    serial: int = -1  # order of creation
    job_id: str | None = None  # the Slurm job id of an allocated job
    extra_kernel: bool = False  # a notebook with a second kernel
    crashed: bool = False  # training whose processes died early (the allocation idles on)


@dataclass(frozen=True, kw_only=True)
class AllocationRow:
    job_id: str
    user: str
    team: str  # "" = look the user up in users.csv
    host: str
    gpu_index: int
    start_s: int
    end_s: int | None  # None = still running at the end of the span
    gpu_uuid: str = ""  # the MIG device it holds; "" = the GPU of gpu_index


@dataclass(frozen=True, kw_only=True)
class _HostDraw:
    """What one host's job planners share: its random stream, the span, the blackouts."""

    rng: np.random.Generator
    span: Span
    team_users: Mapping[str, Sequence[str]]
    blackouts: Sequence[tuple[int, int]]

    def sessions(
        self, duration: Callable[[], float], gap: Callable[[], float]
    ) -> list[tuple[int, int]]:
        """Back-to-back intervals with gaps from the horizon to the span's end, avoiding
        the blackouts."""
        out: list[tuple[int, int]] = []
        t = self.span.horizon_s + int(self.rng.uniform(0.0, 1.0) * gap())
        while t < self.span.end_s:
            length = int(duration())
            s, e = t, t + length
            for b0, b1 in self.blackouts:
                if b0 <= s < b1:
                    s, e = b1, b1 + length
                elif s < b0 < e:
                    e = b0
            if e - s >= 600 and s < self.span.end_s:
                out.append((s, e))
            t = max(e, s) + int(gap()) + 60
        return out

    def pick(self, items: Sequence[str]) -> str:
        return items[int(self.rng.integers(0, len(items)))]

    def user_of(self, team: str) -> str:
        return self.pick(self.team_users[team])


def plan_jobs(
    hosts: list[HostPlan],
    gpus: list[GpuPlan],
    events: Events,
    *,
    seed: int,
    span: Span,
    team_users: Mapping[str, Sequence[str]],
) -> list[Job]:
    """Every host's jobs in order of creation, the allocated ones with their Slurm job id."""
    drafts: list[Job] = []
    external_forced = False  # the first mixed host's last notebook is the external user's
    for host in hosts:
        rng = np.random.default_rng([seed, 2, host.index])
        draw = _HostDraw(
            rng=rng, span=span, team_users=team_users, blackouts=blackouts(host, events, span)
        )
        by_role: dict[str, list[GpuPlan]] = {}
        for g in sorted((g for g in gpus if g.host.index == host.index), key=lambda g: g.index):
            by_role.setdefault(g.role, []).append(g)
        train = by_role.get("train", [])
        if train:
            streams = [train]
            if len(train) >= 2 and rng.random() < 0.5:
                half = len(train) // 2
                streams = [train[:half], train[half:]]
            for stream in streams:
                drafts += _training(draw, stream, owner=None)
        if owned_train := by_role.get("owned_train", []):
            drafts += _training(draw, owned_train, owner=host.owner_team)
        notebooks = by_role.get("notebook", [])
        for i, gpu in enumerate(notebooks):
            force = not external_forced and host.kind == "mixed" and i == len(notebooks) - 1
            external_forced = external_forced or force
            drafts += _notebooks(draw, gpu, force_external=force)
        for gpu in by_role.get("rogue", []):
            drafts += _rogue(draw, gpu)
        for gpu in by_role.get("inference", []):
            drafts += _inference(draw, gpu)
        for gpu in by_role.get("dev", []):
            drafts += _dev(draw, gpu)
    jobs = [replace(job, serial=serial) for serial, job in enumerate(drafts)]
    return _with_job_ids(jobs, seed=seed)


def _with_job_ids(jobs: list[Job], *, seed: int) -> list[Job]:
    """The jobs with Slurm job ids on the allocated ones, numbered in submission order."""
    allocated = sorted((j for j in jobs if j.allocated), key=lambda j: (j.start_s, j.serial))
    base = 4_800_000 + seed % 1000 * 1000
    ids = {
        job.serial: str(base + number * 3 + job.serial % 3) for number, job in enumerate(allocated)
    }
    return [replace(job, job_id=ids.get(job.serial)) for job in jobs]


def overlaps_span(job: Job, span: Span) -> bool:
    """Whether the job is an allocation that overlaps the span (what sacct lists)."""
    return job.allocated and job.end_s > span.start_s and job.start_s < span.end_s


def allocation_rows(jobs: list[Job], span: Span) -> list[AllocationRow]:
    """One row per GPU of each allocation that overlaps the span, in submission order."""
    return [
        AllocationRow(
            job_id=str(job.job_id),
            user=job.user,
            team=job.team_field,
            host=gpu.host.name,
            gpu_index=gpu.index,
            start_s=job.start_s,
            end_s=job.end_s if job.end_s < span.end_s else None,
        )
        for job in sorted(jobs, key=lambda j: (j.start_s, j.serial))
        if overlaps_span(job, span)
        for gpu in job.gpus
    ]


def _training(draw: _HostDraw, stream: list[GpuPlan], *, owner: str | None) -> list[Job]:
    """Multi-GPU training runs back to back, some crashed early (the allocation idles on)."""
    rng = draw.rng

    def duration() -> float:
        hours = rng.uniform(0.5, 3.0) if rng.random() < 0.3 else rng.uniform(4.0, 30.0)
        return hours * HOUR_S

    def gap() -> float:
        return float(rng.exponential(5 * HOUR_S if owner else 25 * 60))

    jobs = []
    for start, end in draw.sessions(duration, gap):
        team = owner or str(rng.choice(TRAINING_TEAMS, p=TRAINING_WEIGHTS))
        user = draw.user_of(team)
        team_field = team if rng.random() < 0.7 else ""
        proc_start = start + int(rng.uniform(30, 120))
        proc_end = end - int(rng.uniform(5, 60))
        crashed = bool(rng.random() < 0.1)  # the allocation idles on until its time limit
        if crashed:
            proc_end = proc_start + int((proc_end - proc_start) * rng.uniform(0.2, 0.8))
        jobs.append(
            Job(
                kind="owned" if owner else "train",
                gpus=tuple(stream),
                start_s=start,
                end_s=end,
                proc_start_s=proc_start,
                proc_end_s=max(proc_end, proc_start + 60),
                user=user,
                team_field=team_field,
                allocated=True,
                crashed=crashed,
            )
        )
    return jobs


def _notebooks(draw: _HostDraw, gpu: GpuPlan, *, force_external: bool) -> list[Job]:
    """Notebook sessions of hours to days; the forced external one overlaps the span's start."""
    rng = draw.rng

    def duration() -> float:
        return float(rng.uniform(4 * HOUR_S, 3 * DAY_S))

    def gap() -> float:
        return float(rng.exponential(3 * HOUR_S))

    sessions = draw.sessions(duration, gap)
    start_s = draw.span.start_s
    first_in_span = next((i for i, (_, e) in enumerate(sessions) if e > start_s), -1)
    jobs = []
    for i, (start, end) in enumerate(sessions):
        if (force_external and i == first_in_span) or rng.random() < 0.06:
            user, team_field = EXTERNAL_USER, ""
        else:
            team = draw.pick(TEAMS)
            user = draw.user_of(team)
            team_field = team if rng.random() < 0.25 else ""
        jobs.append(
            Job(
                kind="notebook",
                gpus=(gpu,),
                start_s=start,
                end_s=end,
                proc_start_s=start + int(rng.uniform(60, 300)),
                proc_end_s=end - 30,
                user=user,
                team_field=team_field,
                allocated=True,
                extra_kernel=bool(rng.random() < 0.2),
            )
        )
    return jobs


def _rogue(draw: _HostDraw, gpu: GpuPlan) -> list[Job]:
    """Processes with no allocation, every other one by a user missing from users.csv."""
    rng = draw.rng

    def duration() -> float:
        return float(rng.uniform(1 * HOUR_S, 10 * HOUR_S))

    def gap() -> float:
        return float(rng.uniform(2 * HOUR_S, 12 * HOUR_S))

    mapped = draw.team_users["research"][-1]
    return [
        Job(
            kind="rogue",
            gpus=(gpu,),
            start_s=start,
            end_s=end,
            proc_start_s=start,
            proc_end_s=end,
            user=ROGUE_UNMAPPED_USER if i % 2 == 0 else mapped,
            team_field="",
            allocated=False,
        )
        for i, (start, end) in enumerate(draw.sessions(duration, gap))
    ]


def _inference(draw: _HostDraw, gpu: GpuPlan) -> list[Job]:
    """One long-running service allocation, restarted around a maintenance window."""
    span = draw.span
    runs = [(span.horizon_s - int(draw.rng.uniform(1, 10) * DAY_S), span.end_s + 30 * DAY_S)]
    for b0, b1 in draw.blackouts:
        runs = [(s, b0) for s, _ in runs] + [(b1, e) for _, e in runs]
    return [
        Job(
            kind="inference",
            gpus=(gpu,),
            start_s=start,
            end_s=end,
            proc_start_s=start + 90,
            proc_end_s=end - 30,
            user=SERVICE_USER,
            team_field="platform",
            allocated=True,
        )
        for start, end in runs
    ]


def _dev(draw: _HostDraw, gpu: GpuPlan) -> list[Job]:
    """Short interactive development sessions."""
    rng = draw.rng

    def duration() -> float:
        return float(rng.uniform(0.5 * HOUR_S, 4 * HOUR_S))

    def gap() -> float:
        return float(rng.exponential(3 * HOUR_S))

    jobs = []
    for start, end in draw.sessions(duration, gap):
        team = draw.pick(TEAMS)
        jobs.append(
            Job(
                kind="dev",
                gpus=(gpu,),
                start_s=start,
                end_s=end,
                proc_start_s=start + int(rng.uniform(20, 90)),
                proc_end_s=end - 20,
                user=draw.user_of(team),
                team_field=team if rng.random() < 0.5 else "",
                allocated=True,
            )
        )
    return jobs
