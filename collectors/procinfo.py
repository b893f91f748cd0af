"""Who owns a GPU process: the user from /proc, the Slurm job id from its cgroup or environment,
or the Kubernetes pod it runs in (`k8s:<pod UID>`) from its cgroup.

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
# The kubelet names a pod's cgroup after the pod's UID:
# cgroupfs driver (v1 or v2): 4:memory:/kubepods/burstable/pod<uid>/<container id>
# systemd driver:  0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
#                  cri-containerd-<container id>.scope   (the UID's dashes written as `_`)
# Seen from inside another cgroup namespace the path is relative (`0::/../../pod<uid>/...`).
_HEX = "[0-9a-fA-F]"
_POD_UID = rf"{_HEX}{{8}}(?:[-_]?{_HEX}{{4}}){{3}}[-_]?{_HEX}{{12}}"
_K8S_POD_CGROUP = re.compile(
    rf"/(?:kubepods[^/\n]*-)?pod({_POD_UID})(?:\.slice)?(?=/|$)", re.MULTILINE
)
K8S_JOB_PREFIX = "k8s:"


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    user: str | None
    job_id: str | None


def slurm_job_id_from_cgroup(text: str) -> str | None:
    """The Slurm job id in the text of /proc/PID/cgroup (v1 or v2), if the process is in a job."""
    match = _SLURM_CGROUP_JOB.search(text)
    return match.group(1) if match else None


def k8s_job_id_from_cgroup(text: str) -> str | None:
    """`k8s:<pod UID>` when the text of /proc/PID/cgroup (v1 or v2) names a pod's cgroup."""
    match = _K8S_POD_CGROUP.search(text)
    return K8S_JOB_PREFIX + match.group(1).replace("_", "-").lower() if match else None


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
            cgroup = (directory / "cgroup").read_text(errors="replace")
            job_id = slurm_job_id_from_cgroup(cgroup) or k8s_job_id_from_cgroup(cgroup)
        if job_id is None:
            # another user's environ needs privileges: then there is no job id
            with contextlib.suppress(OSError):
                job_id = slurm_job_id_from_environ((directory / "environ").read_bytes())
        return ProcessOwner(user=self._user_name(uid), job_id=job_id)
