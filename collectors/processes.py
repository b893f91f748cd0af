"""The processes on a GPU or MIG device: NVML's compute, graphics and MPS lists, counted once
per pid with the most memory seen, and their owners from the host's /proc."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpufleet.collectors.metrics import INT64_MAX, PROCESS_LISTS, GpuProcess
from gpufleet.collectors.procinfo import ProcessInfo

if TYPE_CHECKING:
    from gpufleet.collectors.safenvml import Nvml


def process_memory(nvml: Nvml, key: str, handle: Any) -> dict[int, int | None] | None:
    """Compute, graphics and MPS processes of one handle: used memory by pid (the
    largest seen; None: not available); None when no list is supported."""
    memory_by_pid: dict[int, int | None] = {}
    answered = False
    for metric, apis in PROCESS_LISTS:
        listed = nvml.call(key, metric, apis, handle, not_found=[])
        if listed is None:
            continue
        answered = True
        for proc in listed:
            _add_process(memory_by_pid, int(proc.pid), proc.usedGpuMemory)
    return memory_by_pid if answered else None


def merged(answers: Sequence[dict[int, int | None] | None]) -> dict[int, int | None] | None:
    """The processes of several handles (a GPU's MIG devices) as one; None if none answered."""
    if len(answers) == 1:
        return answers[0]
    memory_by_pid: dict[int, int | None] = {}
    answered = False
    for answer in answers:
        if answer is None:
            continue
        answered = True
        for pid, used in answer.items():
            _add_process(memory_by_pid, pid, used)
    return memory_by_pid if answered else None


def owned(
    procinfo: ProcessInfo, memory_by_pid: dict[int, int | None] | None
) -> list[GpuProcess] | None:
    """The processes with their owners. NVML gives host pids, so their owners are read
    from the host's /proc."""
    if memory_by_pid is None:
        return None
    processes = []
    for pid in sorted(memory_by_pid):
        owner = procinfo.owner(pid)
        processes.append(
            GpuProcess(
                pid=pid,
                user=owner.user,
                used_mem_bytes=memory_by_pid[pid],
                job_id=owner.job_id,
            )
        )
    return processes


def _add_process(memory_by_pid: dict[int, int | None], pid: int, used: int | None) -> None:
    """Count a listed process once per pid, with the largest memory seen (None, NVML's
    NVML_VALUE_NOT_AVAILABLE, only while no list gave a number)."""
    previous = memory_by_pid.get(pid)
    if used is None:
        memory_by_pid.setdefault(pid, None)
    else:
        used = min(int(used), INT64_MAX)
        memory_by_pid[pid] = used if previous is None else max(previous, used)
