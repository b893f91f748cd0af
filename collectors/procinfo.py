"""Who owns a GPU process: the user from /proc, the Slurm job id from its cgroup or environment.

NVML reports host PIDs (the driver ignores PID namespaces), so the collector must see the
host's /proc (run it on the host, or with `--pid=host` in a container). A PID that has gone
away gives an owner with nulls.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

# cgroup v2: 0::/system.slice/slurmstepd.scope/job_123/step_0/...  (or <node>_slurmstepd.scope)
# cgroup v1: 4:memory:/slurm/uid_1000/job_123/step_0/...            (or /slurm_<node>/...)
_SLURM_CGROUP_JOB = re.compile(r"/[^/\n]*slurm[^/\n]*/(?:uid_\d+/)?job_(\d+)(?:/|$)", re.MULTILINE)
_SLURM_ENV_JOB = re.compile(rb"(?:^|\0)SLURM_JOB_ID=(\d+)(?:\0|$)")


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    user: str | None
    job_id: str | None


def slurm_job_id_from_cgroup(text: str) -> str | None:
    """The Slurm job id in the text of /proc/PID/cgroup (v1 or v2), if the process is in a job."""
    match = _SLURM_CGROUP_JOB.search(text)
    return match.group(1) if match else None


def slurm_job_id_from_environ(data: bytes) -> str | None:
    """`SLURM_JOB_ID` in the NUL-separated text of /proc/PID/environ."""
    match = _SLURM_ENV_JOB.search(data)
    return match.group(1).decode() if match else None


class ProcessInfo:
    """Looks up process owners, caching them while the process stays on a GPU."""

    def __init__(self, *, proc_root: Path = Path("/proc")) -> None:
        self._proc_root = proc_root
        self._owners: dict[int, ProcessOwner] = {}
        self._seen: set[int] = set()
        self._user_names: dict[int, str] = {}

    def owner(self, pid: int) -> ProcessOwner:
        self._seen.add(pid)
        owner = self._owners.get(pid)
        if owner is None:
            owner = self._look_up(pid)
            self._owners[pid] = owner
        return owner

    def sweep(self) -> None:
        """Forget the processes not asked about since the last sweep (call once per tick)."""
        for pid in [pid for pid in self._owners if pid not in self._seen]:
            del self._owners[pid]
        self._seen.clear()

    def _user_name(self, uid: int) -> str:
        name = self._user_names.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except KeyError:
                name = str(uid)
            self._user_names[uid] = name
        return name

    def _look_up(self, pid: int) -> ProcessOwner:
        directory = self._proc_root / str(pid)
        try:
            uid = os.stat(directory).st_uid
        except OSError:
            return ProcessOwner(user=None, job_id=None)
        job_id: str | None = None
        with contextlib.suppress(OSError):
            job_id = slurm_job_id_from_cgroup((directory / "cgroup").read_text(errors="replace"))
        if job_id is None:
            # another user's environ needs privileges: then there is no job id
            with contextlib.suppress(OSError):
                job_id = slurm_job_id_from_environ((directory / "environ").read_bytes())
        return ProcessOwner(user=self._user_name(uid), job_id=job_id)
