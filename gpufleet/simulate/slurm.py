"""The Slurm side of a simulated fleet: what sacct, squeue and jobstats' prolog know.

- `GpuHolders`: which job holds each GPU when, the collector's `--slurm-gpustat` evidence
  (`alloc_job_id`, `alloc_user` of the samples, filled by `rows`);
- `write_slurm_outputs`: saved `sacct --json` (every allocated job that overlaps the span)
  and `squeue --json` (taken at the span's end: the jobs still running, with the indices of
  their GPUs) in Slurm 22.05's schema, for `gpufleet import slurm --sacct-json ...
  --squeue-json ...`.

A job's account is its team: the allocation's team, else its user's users.csv team; the
external collaborator, who is in no team, is given the account of the team that hosts them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpufleet.simulate.jobs import Job, overlaps_span
from gpufleet.simulate.layout import GpuPlan
from gpufleet.simulate.span import Span
from gpufleet.simulate.teams import EXTERNAL_ACCOUNT

CLUSTER = "sim"
SLURM_FOLDER = "slurm"  # under the data directory; ingest reads nothing there
SACCT_FILE = "sacct.json"
SQUEUE_FILE = "squeue.json"
OPEN_US = np.iinfo(np.int64).max  # the end of an allocation still running at the span's end
CPUS_PER_GPU = 16
MEM_MB_PER_GPU = 128_000
_NAMES = {
    "train": "train",
    "owned": "train",
    "notebook": "jupyter",
    "inference": "infer-server",
    "dev": "bash",
}
_SACCT_META = {
    "plugin": {"type": "openapi/dbv0.0.38", "name": "Slurm OpenAPI DB v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}
_SQUEUE_META = {
    "plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
    "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"},
}


@dataclass(frozen=True, kw_only=True)
class GpuHolders:
    """The allocations of each GPU, by ordinal: `offsets[o]:offsets[o + 1]` index the
    arrays, sorted by start. An allocation holds the GPU over (start, end]."""

    offsets: np.ndarray  # int64, len(gpus) + 1
    start_us: np.ndarray  # int64
    end_us: np.ndarray  # int64; OPEN_US: still running at the span's end
    holder: np.ndarray  # int32 into job_ids and users
    job_ids: list[str]
    users: list[str]

    def at(self, ordinal: int, ts_us: np.ndarray) -> np.ndarray:
        """The holder of the GPU at each ts (-1: none)."""
        lo, hi = int(self.offsets[ordinal]), int(self.offsets[ordinal + 1])
        if lo == hi:
            return np.full(len(ts_us), -1, dtype=np.int32)
        k = np.searchsorted(self.start_us[lo:hi], ts_us, side="left") - 1
        found = k >= 0
        k = np.where(found, k, 0) + lo
        return np.where(found & (ts_us <= self.end_us[k]), self.holder[k], -1).astype(np.int32)


def gpu_holders(jobs: Sequence[Job], gpus: Sequence[GpuPlan], span: Span) -> GpuHolders:
    """Which job holds each GPU when: the allocated jobs that overlap the span."""
    held = [j for j in sorted(jobs, key=lambda j: (j.start_s, j.serial)) if overlaps_span(j, span)]
    per_gpu: list[list[tuple[int, int, int]]] = [[] for _ in gpus]
    for number, job in enumerate(held):
        end_us = OPEN_US if job.end_s >= span.end_s else job.end_s * 1_000_000
        for gpu in job.gpus:
            per_gpu[gpu.ordinal].append((job.start_s * 1_000_000, end_us, number))
    flat = [entry for entries in per_gpu for entry in sorted(entries)]
    return GpuHolders(
        offsets=np.cumsum([0] + [len(entries) for entries in per_gpu], dtype=np.int64),
        start_us=np.array([s for s, _, _ in flat], dtype=np.int64),
        end_us=np.array([e for _, e, _ in flat], dtype=np.int64),
        holder=np.array([n for _, _, n in flat], dtype=np.int32),
        job_ids=[str(job.job_id) for job in held],
        users=[job.user for job in held],
    )


def write_slurm_outputs(
    jobs: Sequence[Job], users: Sequence[tuple[str, str]], span: Span, data_dir: Path
) -> list[Path]:
    """`<data_dir>/slurm/sacct.json` and `squeue.json`, as Slurm 22.05 prints them at the
    span's end."""
    folder = data_dir / SLURM_FOLDER
    return [
        _write_json(folder / SACCT_FILE, sacct_output(jobs, users, span)),
        _write_json(folder / SQUEUE_FILE, squeue_output(jobs, users, span)),
    ]


def _write_json(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


def _slurm_jobs(jobs: Sequence[Job], span: Span) -> list[Job]:
    """The allocated jobs that overlap the span, in job id order."""
    return sorted((j for j in jobs if overlaps_span(j, span)), key=lambda j: int(str(j.job_id)))


def account(job: Job, teams: dict[str, str]) -> str:
    """The job's account: its allocation's team, else its user's team."""
    return job.team_field or teams.get(job.user) or EXTERNAL_ACCOUNT


def state(job: Job, span: Span) -> str:
    """sacct's state at the span's end."""
    if job.end_s >= span.end_s:
        return "RUNNING"
    if job.crashed:
        return "FAILED"
    if job.kind == "notebook":
        return "TIMEOUT"  # a session held until its time limit
    if job.kind == "inference":
        return "CANCELLED"  # stopped for the maintenance window
    return "COMPLETED"


def _limit_minutes(job: Job, span: Span) -> int:
    """The time limit: reached by the jobs that ran out of time (sessions, crashed runs
    idling on), the whole hour above the run's length plus one for the others."""
    minutes = math.ceil((job.end_s - job.start_s) / 60)
    if state(job, span) in ("TIMEOUT", "FAILED", "RUNNING"):
        return minutes
    return (math.ceil(minutes / 60) + 1) * 60


def _submitted(job: Job) -> int:
    return job.start_s - 5 - 60 * (job.serial % 7)


def _partition(job: Job) -> str:
    return "interactive" if job.kind in ("notebook", "dev") else "gpu"


def _nodes(job: Job) -> list[str]:
    return list(dict.fromkeys(g.host.name for g in job.gpus))


def _tres(job: Job) -> list[dict[str, Any]]:
    gpus = len(job.gpus)
    gres = job.gpus[0].host.model.gres_type
    return [
        {"type": "cpu", "name": None, "id": 1, "count": CPUS_PER_GPU * gpus},
        {"type": "mem", "name": None, "id": 2, "count": MEM_MB_PER_GPU * gpus},
        {"type": "node", "name": None, "id": 4, "count": len(_nodes(job))},
        {"type": "billing", "name": None, "id": 5, "count": CPUS_PER_GPU * gpus},
        {"type": "gres", "name": "gpu", "id": 1001, "count": gpus},
        {"type": "gres", "name": f"gpu:{gres}", "id": 1002, "count": gpus},
    ]


def _exit_code(job: Job, span: Span) -> dict[str, Any]:
    if state(job, span) == "FAILED":
        return {"status": "FAILED", "return_code": 1}
    return {"status": "SUCCESS", "return_code": 0}


def sacct_output(
    jobs: Sequence[Job], users: Sequence[tuple[str, str]], span: Span
) -> dict[str, Any]:
    """`sacct --json --allusers --allocations` over the span, run at its end."""
    teams = dict(users)
    out = []
    for job in _slurm_jobs(jobs, span):
        ended = job.end_s < span.end_s
        end = job.end_s if ended else 0
        acct = account(job, teams)
        zero = {"seconds": 0, "microseconds": 0}
        out.append(
            {
                "account": acct,
                "comment": {"administrator": None, "job": None, "system": None},
                "allocation_nodes": len(_nodes(job)),
                "array": {
                    "job_id": 0,
                    "limits": {"max": {"running": {"tasks": 0}}},
                    "task": None,
                    "task_id": None,
                },
                "association": {
                    "account": acct,
                    "cluster": CLUSTER,
                    "partition": None,
                    "user": job.user,
                },
                "cluster": CLUSTER,
                "constraints": "",
                "container": None,
                "derived_exit_code": _exit_code(job, span),
                "time": {
                    "elapsed": (job.end_s if ended else span.end_s) - job.start_s,
                    "eligible": _submitted(job),
                    "end": end,
                    "start": job.start_s,
                    "submission": _submitted(job),
                    "suspended": 0,
                    "system": zero,
                    "limit": _limit_minutes(job, span),
                    "total": zero,
                    "user": zero,
                },
                "exit_code": _exit_code(job, span),
                "flags": ["CLEAR_SCHEDULING", "STARTED_ON_SCHEDULE"],
                "group": job.user,
                "het": {"job_id": 0, "job_offset": None},
                "job_id": int(str(job.job_id)),
                "name": _NAMES.get(job.kind, job.kind),
                "mcs": {"label": ""},
                "nodes": ",".join(_nodes(job)),
                "partition": _partition(job),
                "priority": 4294901759 - job.serial % 1000,
                "qos": "normal",
                "required": {"CPUs": CPUS_PER_GPU * len(job.gpus), "memory": 0},
                "kill_request_user": None,
                "reservation": {"id": 0, "name": 0},
                "state": {"current": state(job, span), "reason": "None"},
                "steps": [],
                "tres": {"allocated": _tres(job), "requested": _tres(job)},
                "user": job.user,
                "wckey": {"wckey": "", "flags": []},
                "working_directory": f"/home/{job.user}",
            }
        )
    return {"meta": _SACCT_META, "errors": [], "jobs": out}


def gpu_ranges(indices: Sequence[int]) -> str:
    """`0-3`, `0,2-3`: GPU indices as Slurm's IDX lists them."""
    parts: list[str] = []
    for index in sorted(indices):
        if parts and index == int(parts[-1].split("-")[-1]) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{index}"
        else:
            parts.append(str(index))
    return ",".join(parts)


def squeue_output(
    jobs: Sequence[Job], users: Sequence[tuple[str, str]], span: Span
) -> dict[str, Any]:
    """`squeue --json --all` at the span's end: the jobs still running and their GPUs."""
    teams = dict(users)
    uids = {user: 20_000 + n for n, user in enumerate(sorted({j.user for j in jobs}))}
    out = []
    for job in _slurm_jobs(jobs, span):
        if job.end_s < span.end_s:
            continue
        nodes = _nodes(job)
        gres = job.gpus[0].host.model.gres_type
        details = []
        for node in nodes:
            indices = [g.index for g in job.gpus if g.host.name == node]
            details.append(f"gpu:{gres}:{len(indices)}(IDX:{gpu_ranges(indices)})")
        gpus = len(job.gpus)
        tres = f"cpu={CPUS_PER_GPU * gpus},mem={MEM_MB_PER_GPU * gpus}M,node={len(nodes)},"
        tres += f"billing={CPUS_PER_GPU * gpus},gres/gpu={gpus},gres/gpu:{gres}={gpus}"
        limit = _limit_minutes(job, span)
        out.append(
            {
                "account": account(job, teams),
                "array_job_id": 0,
                "array_task_id": None,
                "array_task_string": "",
                "batch_host": nodes[0],
                "cluster": CLUSTER,
                "cpus": CPUS_PER_GPU * gpus,
                "current_working_directory": f"/home/{job.user}",
                "end_time": job.start_s + 60 * limit,
                "gres_detail": details,
                "group_name": job.user,
                "het_job_id": 0,
                "het_job_offset": 0,
                "job_id": int(str(job.job_id)),
                "job_resources": {
                    "nodes": ",".join(nodes),
                    "allocated_cores": CPUS_PER_GPU * gpus,
                    "allocated_hosts": len(nodes),
                    "allocated_nodes": [
                        {
                            "sockets": {},
                            "nodename": node,
                            "cpus_used": 0,
                            "memory_used": 0,
                            "memory_allocated": 0,
                        }
                        for node in nodes
                    ],
                },
                "job_state": "RUNNING",
                "name": _NAMES.get(job.kind, job.kind),
                "node_count": len(nodes),
                "nodes": ",".join(nodes),
                "partition": _partition(job),
                "qos": "normal",
                "start_time": job.start_s,
                "state_reason": "None",
                "submit_time": _submitted(job),
                "time_limit": limit,
                "tres_per_node": f"gres:gpu:{gres}:{gpus // len(nodes)}",
                "tres_req_str": tres,
                "tres_alloc_str": tres,
                "user_id": uids[job.user],
                "user_name": job.user,
            }
        )
    return {"meta": _SQUEUE_META, "errors": [], "jobs": out}
