"""The simulated fleet's whole story, drawn once per spec from its seed: `build_scenario`.

It puts together the layout (hosts, GPUs, reference rows), the events, the jobs with their
allocations and every GPU's timeline. Everything that happens in the span is fixed here,
so any time window of it can be generated on its own (`rows`) and windows fit together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufleet.simulate.events import Events, plan_events
from gpufleet.simulate.jobs import AllocationRow, Job, allocation_rows, plan_jobs
from gpufleet.simulate.layout import GpuPlan, HostPlan, host_rules, plan_layout
from gpufleet.simulate.mig import MigPlan, mig_allocation_rows, plan_mig
from gpufleet.simulate.models import GPU_MODELS
from gpufleet.simulate.slurm import GpuHolders, gpu_holders
from gpufleet.simulate.span import Span
from gpufleet.simulate.teams import team_users, users
from gpufleet.simulate.timelines import Timelines, build_timelines


@dataclass(kw_only=True)
class Scenario:
    hosts: list[HostPlan]
    gpus: list[GpuPlan]
    users: list[tuple[str, str]]  # (user, team) rows of users.csv
    host_rules: list[tuple[str, str]]  # (host_glob, team) rows of hosts.csv
    prices: list[tuple[str, float]]  # (gpu_glob, usd_per_gpu_hour) rows of prices.csv
    jobs: list[Job]
    allocations: list[AllocationRow]
    holders: GpuHolders  # which job holds each GPU when (the collector's gpustat evidence)
    events: Events
    timelines: Timelines
    interval_us: int
    span_start_s: int
    span_end_s: int
    timezone: str
    mig: MigPlan = field(default_factory=dict)  # the MIG devices of each MIG GPU
    _by_host: dict[int, list[GpuPlan]] = field(default_factory=dict, repr=False)

    @property
    def span(self) -> Span:
        return Span(
            start_s=self.span_start_s,
            end_s=self.span_end_s,
            interval_us=self.interval_us,
            timezone=self.timezone,
        )

    def host_gpus(self, host: HostPlan) -> list[GpuPlan]:
        """The host's GPUs in uuid order. The index is kept only once whole: hosts' rows are
        generated in threads, and one that found it half filled lost its host's GPUs."""
        if not self._by_host:
            by_host: dict[int, list[GpuPlan]] = {}
            for gpu in self.gpus:
                by_host.setdefault(gpu.host.index, []).append(gpu)
            self._by_host = by_host
        return self._by_host[host.index]


def build_scenario(
    *,
    seed: int,
    gpus: int,
    gpus_per_host: int,
    interval_us: int,
    span_start_s: int,
    span_end_s: int,
    timezone: str,
    mig: bool = False,
) -> Scenario:
    """Draw the whole scenario for a spec: layout, reference rows, jobs and timelines, and
    with `mig` some GPUs split into MIG devices (`mig`)."""
    span = Span(start_s=span_start_s, end_s=span_end_s, interval_us=interval_us, timezone=timezone)
    hosts, gpu_plans = plan_layout(
        seed=seed, gpus=gpus, gpus_per_host=gpus_per_host, interval_us=interval_us
    )
    events = plan_events(hosts, gpu_plans, span)
    user_rows = users(gpus)
    jobs = plan_jobs(
        hosts, gpu_plans, events, seed=seed, span=span, team_users=team_users(user_rows)
    )
    mig_plan = plan_mig(gpu_plans, [u for u, _ in user_rows], seed=seed) if mig else {}
    models = [m for m in GPU_MODELS if any(h.model == m for h in hosts)]
    return Scenario(
        hosts=hosts,
        gpus=gpu_plans,
        users=user_rows,
        host_rules=host_rules(hosts),
        prices=[(m.price_glob, m.usd_per_gpu_hour) for m in models],
        jobs=jobs,
        allocations=allocation_rows(jobs, span) + mig_allocation_rows(gpu_plans, mig_plan, span),
        holders=gpu_holders(jobs, gpu_plans, span),
        events=events,
        timelines=build_timelines(jobs, gpu_plans, events, seed=seed, span=span, mig=mig_plan),
        interval_us=interval_us,
        span_start_s=span_start_s,
        span_end_s=span_end_s,
        timezone=timezone,
        mig=mig_plan,
    )
