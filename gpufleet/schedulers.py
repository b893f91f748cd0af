"""Which scheduler holds a job, and what frees its GPUs: the advice of the idle notices and
the team emails (docs/notices.md#what-to-do).

- **Slurm**: a job of `slurm_jobs` (`gpufleet import slurm`: its `job_id`, or an array
  task's `job_id_raw`), or a job a sample's process names (`attributed_by = 'process'`):
  by the sample format a process's `job_id` is its Slurm job id, or `k8s:<pod UID>`.
  Advice: `scancel <job>`.
- **Kubernetes**: a pod `gpufleet import prometheus` recorded as an allocation, job id
  `namespace/pod` (two Kubernetes names) and no Slurm job: `kubectl delete pod <pod> -n
  <namespace>`; a process in a pod known by its UID only (`k8s:<uid>`): find the pod's name
  by the UID, then delete it.
- **Other**: any other job (an allocation file from another scheduler): end it through its
  scheduler or release the allocation. No job at all: stop the processes on the GPUs.

The commands quote what they name (`shlex.quote`), so a job id copied from a message runs
as one word, whatever it holds.
"""

from __future__ import annotations

import re
import shlex
from enum import StrEnum

import duckdb

_POD = re.compile(
    r"(?P<namespace>[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)"
    r"/(?P<pod>[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)"
)
_POD_UID_PREFIX = "k8s:"  # collectors/procinfo.K8S_JOB_PREFIX
PROCESS = "process"  # idle_episodes.attributed_by of a job a process named
_NO_SLURM_JOBS = "select null::varchar as job_id, null::varchar as job_id_raw where false"


class Scheduler(StrEnum):
    SLURM = "Slurm"
    KUBERNETES = "Kubernetes"
    OTHER = "other"
    NONE = "none"  # no job: processes of a user, or GPUs a team has through hosts.csv


def scheduler_of(job_id: str | None, *, attributed_by: str | None, is_slurm_job: bool) -> Scheduler:
    """The scheduler of a job (see the module's rules); `is_slurm_job`: `slurm_jobs` has it."""
    if job_id is None:
        return Scheduler.NONE
    if is_slurm_job:
        return Scheduler.SLURM
    if job_id.startswith(_POD_UID_PREFIX) or _POD.fullmatch(job_id):
        return Scheduler.KUBERNETES
    if attributed_by == PROCESS:
        return Scheduler.SLURM
    return Scheduler.OTHER


def job_label(job_id: str | None, scheduler: Scheduler) -> str:
    """How a message names the job: `job 4807074`, `pod ml-serving/llm-0`, `no job`."""
    if job_id is None:
        return "no job"
    if scheduler == Scheduler.KUBERNETES:
        if job_id.startswith(_POD_UID_PREFIX):
            return f"pod with UID {job_id.removeprefix(_POD_UID_PREFIX)}"
        return f"pod {job_id}"
    return f"job {job_id}"


def end_command(job_id: str | None, scheduler: Scheduler) -> str | None:
    """The one command that frees the job's GPUs, where there is one."""
    if job_id is None:
        return None
    if scheduler == Scheduler.SLURM:
        return f"scancel {shlex.quote(job_id)}"
    pod = _POD.fullmatch(job_id) if scheduler == Scheduler.KUBERNETES else None
    if pod is not None:
        return f"kubectl delete pod {pod['pod']} -n {pod['namespace']}"
    return None


def advice(job_id: str | None, scheduler: Scheduler) -> str:
    """What frees the job's idle GPUs, in one sentence (the command last, where there is
    one): `end the job if it no longer needs them: scancel 4807074`."""
    command = end_command(job_id, scheduler)
    if command is not None:
        what = "delete the pod" if scheduler == Scheduler.KUBERNETES else "end the job"
        return f"{what} if it no longer needs them: {command}"
    if scheduler == Scheduler.KUBERNETES and job_id is not None:
        uid = shlex.quote(job_id.removeprefix(_POD_UID_PREFIX))
        return (
            "delete the pod if it no longer needs them; its name and namespace: "
            "kubectl get pods -A -o custom-columns=NAMESPACE:.metadata.namespace,"
            f"NAME:.metadata.name,UID:.metadata.uid | grep {uid}"
        )
    if scheduler == Scheduler.OTHER:
        return (
            "end the job through its scheduler, or release its allocation, "
            "if it no longer needs them"
        )
    return (
        "stop the processes that hold them if they no longer need them "
        "(nvidia-smi on the host lists them)"
    )


def slurm_jobs_sql(con: duckdb.DuckDBPyConnection) -> str:
    """A query for (job_id, job_id_raw) of every job of `slurm_jobs` (none without the
    table, in a warehouse that never ingested a job file)."""
    ((tables,),) = con.execute(
        "select count(*) from duckdb_tables() where database_name = current_database()"
        " and schema_name = 'main' and table_name = 'slurm_jobs'"
    ).fetchall()
    if not tables:
        return _NO_SLURM_JOBS
    return "select job_id, job_id_raw from main.slurm_jobs"
