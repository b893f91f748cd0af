"""`sacct --json`: every job's user, account, nodes, times, state and GPU count.

sacct knows each job that ran, finished or failed, but not which GPUs of a node it held:
its `tres.allocated` gives the count only (`{"type": "gres", "name": "gpu", "count": 2}`).
The indices come from squeue while the job runs (`squeue.py`).
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from gpufleet.config import IngestConfig
from gpufleet.integrations.slurm.hostlist import expand_hostlist
from gpufleet.integrations.slurm.payload import (
    Job,
    Payload,
    Refused,
    RefusedTime,
    number,
    time_limits,
)


class SlurmJob(NamedTuple):
    job_id: str  # as Slurm prints it: 123, 123_4 (array task 4), 123+1 (heterogeneous part)
    # The job's own number (sacct's and squeue's `job_id`): an array task's or a
    # heterogeneous component's SLURM_JOB_ID, which its processes' cgroup and jobstats'
    # gpustat files name (123_4 may be job 130); the printed id for any other job.
    job_id_raw: str | None
    user: str | None
    account: str | None
    partition: str | None
    cluster: str | None
    state: str  # COMPLETED, RUNNING, FAILED, ... (the first flag of newer releases' lists)
    start_ts: dt.datetime | None  # None: not started
    end_ts: dt.datetime | None  # None: still running (or not started)
    nodes: tuple[str, ...]
    gpus: int  # GPUs allocated (the gres/gpu TRES)

    @property
    def started(self) -> bool:
        return self.start_ts is not None


def job_id(job: Job, base: int | None, array: tuple[str, str], het: tuple[str, str]) -> str:
    """The id Slurm prints: `<array job>_<task>` for an array task, `<het job>+<offset>`
    for a component of a heterogeneous job, else the job id."""
    array_job = number(job, array[0], job.get(array[0], required=False))
    task = number(job, array[1], job.get(array[1], required=False))
    if array_job and task is not None:
        return f"{array_job}_{task}"
    het_job = number(job, het[0], job.get(het[0], required=False))
    offset = number(job, het[1], job.get(het[1], required=False))
    if het_job and offset is not None:
        return f"{het_job}+{offset}"
    return str(base)


def _gpus(job: Job) -> int:
    """The count of the `gres/gpu` entry of `tres.allocated` (0 when there is none)."""
    allocated = job.get("tres.allocated")
    if not isinstance(allocated, list):
        raise job.error("tres.allocated", "expected a list of TRES")
    for position, entry in enumerate(allocated):
        path = f"tres.allocated[{position}]"
        if not isinstance(entry, dict):
            raise job.error(path, "expected an object with type, name and count")
        if entry.get("type") == "gres" and entry.get("name") == "gpu":
            return number(job, f"{path}.count", entry.get("count")) or 0
    return 0


def parse_sacct(
    payload: Payload,
    *,
    now: dt.datetime | None = None,
    ingest: IngestConfig | None = None,
    refused: list[Refused] | None = None,
) -> list[SlurmJob]:
    """The jobs of a `sacct --json` payload (of any schema `load_payload` accepts). A job
    with a time before `ingest.earliest`, more than `ingest.max_clock_skew_minutes` after
    `now` (None: past year 9999) or an end before its start is refused: added to `refused`
    and left out (None: the parse fails with its line). `ingest` None: the defaults."""
    jobs = []
    limits = time_limits(ingest, now)
    for index, data in enumerate(payload.jobs):
        job = Job(payload, index, data, limits=limits)
        base = job.number("job_id")
        printed = job_id(job, base, ("array.job_id", "array.task_id"), _HET)
        states = job.states("state.current")
        nodes = job.text("nodes")
        try:
            start, end = job.timestamp("time.start"), job.timestamp("time.end")
            if start is not None and end is not None and end < start:
                raise RefusedTime(
                    "time.end",
                    f"{end:%Y-%m-%dT%H:%M:%SZ} is before time.start ({start:%Y-%m-%dT%H:%M:%SZ})",
                )
        except RefusedTime as refusal:
            job.refuse(printed, refusal, refused)
            continue
        jobs.append(
            SlurmJob(
                job_id=printed,
                job_id_raw=None if base is None else str(base),
                user=job.text("user"),
                account=job.text("account"),
                partition=job.text("partition"),
                cluster=job.text("cluster"),
                state=states[0],
                start_ts=start,
                end_ts=end,
                nodes=expand_hostlist(nodes) if nodes and nodes != "None assigned" else (),
                gpus=_gpus(job),
            )
        )
    return jobs


_HET = ("het.job_id", "het.job_offset")
