"""The one-off events of the span: a hot rack, a silent collector, a driver reload and
failing memory.

The hot rack's hosts run hotter and throttle (see `activity`); one training host's collector
writes nothing for up to 90 minutes; on one host a GPU falls off the bus (status 'lost')
until its driver is reloaded, which restarts its energy and violation counters at ~0, and
no job runs there around the reload (a maintenance window); the GPU's last sample before it
fell off reports XID 79. On the span's last day one training GPU's uncorrected ECC count
grows and another has rows pending remapping to the end: both are to be drained.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpufleet.simulate.layout import GpuPlan, HostPlan
from gpufleet.simulate.span import DAY_S, Span
from gpufleet.simulate.states import Points, State, overlay


@dataclass(frozen=True, kw_only=True)
class Events:
    """The one-off phenomena, in epoch seconds."""

    gap_host: str
    gap_start_s: int
    gap_end_s: int
    reload_host: str
    reload_s: int
    lost_gpu_uuid: str
    lost_start_s: int
    hot_rack: int
    hot_hosts: tuple[str, ...]
    ecc_gpu_uuid: str | None = None  # its uncorrected ECC count rises by one at each time
    ecc_times_s: tuple[int, ...] = ()
    remap_gpu_uuid: str | None = None  # remapped_rows_pending from remap_start_s on
    remap_start_s: int = 0

    def silent(self, host: str, ts_us: np.ndarray) -> np.ndarray:
        """Which of the host's sample timestamps fall in its collector's silence."""
        if host != self.gap_host:
            return np.zeros(len(ts_us), dtype=bool)
        return (ts_us >= self.gap_start_s * 1_000_000) & (ts_us < self.gap_end_s * 1_000_000)


def plan_events(hosts: list[HostPlan], gpus: list[GpuPlan], span: Span) -> Events:
    """Where and when the events happen: fixed fractions into the span, on hosts of a kind."""
    training = [h for h in hosts if h.kind == "training"]
    interactive = [h for h in hosts if h.kind == "interactive"]
    gap_host = training[-1] if training else hosts[0]
    reload_host = interactive[0] if interactive else hosts[-1]
    length = span.length_s
    gap_len = max(3 * span.interval_us // 1_000_000, min(90 * 60, length // 4))
    gap_start = span.start_s + (int(length * 0.4) // 60) * 60 + 7
    reload_s = span.start_s + (int(length * 0.6) // 60) * 60 + 13
    lost_gpu = next(g for g in gpus if g.host.index == reload_host.index and g.index == 0)
    hot_hosts = [h for h in hosts if h.hot]
    failing = [g for g in gpus if g.role == "train" and g.uuid != lost_gpu.uuid]
    last_day = min(DAY_S, length)
    return Events(
        gap_host=gap_host.name,
        gap_start_s=gap_start,
        gap_end_s=gap_start + gap_len,
        reload_host=reload_host.name,
        reload_s=reload_s,
        lost_gpu_uuid=lost_gpu.uuid,
        lost_start_s=reload_s - min(20 * 60, max(length // 40, 60)),
        hot_rack=hot_hosts[0].rack,
        hot_hosts=tuple(h.name for h in hot_hosts),
        ecc_gpu_uuid=failing[0].uuid if failing else None,
        ecc_times_s=tuple(span.end_s - int(last_day * f) // 60 * 60 + 29 for f in (0.8, 0.35)),
        remap_gpu_uuid=failing[-1].uuid if len(failing) > 1 else None,
        remap_start_s=span.end_s - int(last_day * 0.5) // 60 * 60 + 41,
    )


def blackouts(host: HostPlan, events: Events, span: Span) -> list[tuple[int, int]]:
    """The host's maintenance windows, [start s, end s): no job runs in them."""
    if host.name != events.reload_host:
        return []
    before = min(45 * 60, max(span.length_s // 20, 120))
    after = min(10 * 60, max(span.length_s // 80, 60))
    return [(events.reload_s - before, events.reload_s + after)]


def with_events(points: Points, gpu: GpuPlan, events: Events) -> Points:
    """The GPU's change points with the events applied: lost while it is off the bus, and a
    piece that starts at the driver reload (where `timelines` restarts its counters)."""
    if gpu.uuid == events.lost_gpu_uuid:
        points = overlay(points, events.lost_start_s, events.reload_s, _lost)
    if gpu.host.name == events.reload_host:
        points = overlay(points, events.reload_s, events.reload_s + 1, _unchanged)
    return points


def _lost(state: State) -> State:
    return replace(state, lost=True)


def _unchanged(state: State) -> State:
    return state
