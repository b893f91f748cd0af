"""XID critical-error events of each GPU, through NVML's event sets.

Each GPU gets its own event set (`nvmlEventSetCreate`), registered for
`nvmlEventTypeXidCriticalError` on its handle, so an event needs no mapping back to its GPU.
Each tick drains it without waiting (`nvmlEventSetWait_v2(set, 0)` until NVML answers
Timeout). A GPU whose driver refuses the registration (NotSupported, NoPermission) has
null `xid_errors`; one with a set and no event in the interval has an empty list.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:
    from gpufleet.collectors.safenvml import Nvml

XID_EVENTS = pynvml.nvmlEventTypeXidCriticalError
METRIC = "xid_errors"  # the key of the events in the wrapper's "unsupported" cache
MAX_EVENTS_PER_TICK = 256  # an XID storm: the rest waits in the set for the next tick


@dataclass(slots=True)
class XidWatch:
    """One GPU's event set, and the XIDs drained since its last row."""

    event_set: Any = None  # pynvml c_nvmlEventSet_t; None: not open (yet, or unsupported)
    pending: list[int] = field(default_factory=list)


def drain(nvml: Nvml, uuid: str, handle: Any, watch: XidWatch) -> None:
    """Move the GPU's new XID events into `watch.pending`, opening its event set first if
    it is not open. Raises GpuLostError / NvmlUninitializedError as any read does; the XIDs
    drained before stay pending, for the row that says the GPU is lost."""
    if watch.event_set is None:
        if nvml.is_unsupported(uuid, METRIC):
            return
        watch.event_set = _open(nvml, uuid, handle)
        if watch.event_set is None:
            return
    for _ in range(MAX_EVENTS_PER_TICK):
        # Timeout (nothing more) and transient errors answer None here.
        data = nvml.call(uuid, METRIC, ("nvmlEventSetWait_v2",), watch.event_set, 0)
        if data is None:
            break
        if data.eventType & XID_EVENTS:
            watch.pending.append(int(data.eventData))
    if nvml.is_unsupported(uuid, METRIC):
        close(watch)


def take(watch: XidWatch) -> list[int] | None:
    """The XIDs for this tick's row (and forget them): None when the GPU has no event set."""
    if watch.event_set is None and not watch.pending:
        return None
    xids, watch.pending = watch.pending, []
    return xids


def close(watch: XidWatch) -> None:
    """Free the event set (errors ignored: on the way out, or NVML was re-initialised)."""
    if watch.event_set is not None:
        with contextlib.suppress(pynvml.NVMLError, pynvml.NVMLLibraryMismatchError):
            pynvml.nvmlEventSetFree(watch.event_set)
    watch.event_set = None


def _open(nvml: Nvml, uuid: str, handle: Any) -> Any:
    """A new event set registered for the GPU's XIDs, or None (unsupported, or not now)."""
    event_set = nvml.call(uuid, METRIC, ("nvmlEventSetCreate",))
    if event_set is None:
        return None
    watch = XidWatch(event_set=event_set)
    try:
        registered = nvml.query(
            uuid, METRIC, ("nvmlDeviceRegisterEvents", _register(handle, event_set))
        )
    except BaseException:
        close(watch)
        raise
    if not registered:
        close(watch)
        return None
    return event_set


def _register(handle: Any, event_set: Any) -> Any:
    def register() -> bool:
        pynvml.nvmlDeviceRegisterEvents(handle, XID_EVENTS, event_set)
        return True

    return register
