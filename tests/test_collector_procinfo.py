"""Process owners: the user from /proc, the Slurm job id from the cgroup path or environment."""

from __future__ import annotations

import os
import pwd

import pytest

from gpufleet.collectors.procinfo import (
    ProcessInfo,
    slurm_job_id_from_cgroup,
    slurm_job_id_from_environ,
)

ME = pwd.getpwuid(os.getuid()).pw_name


@pytest.mark.parametrize(
    ("text", "job_id"),
    [
        ("0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n", "4711"),
        ("0::/system.slice/node17_slurmstepd.scope/job_12/step_batch/user/task_0\n", "12"),
        (
            "12:pids:/slurm/uid_1000/job_99/step_0/task_0\n"
            "4:memory:/slurm/uid_1000/job_99/step_0/task_0\n"
            "1:name=systemd:/user.slice/user-1000.slice/session-3.scope\n",
            "99",
        ),
        ("5:cpuset:/slurm_node3/uid_0/job_7/step_extern\n", "7"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/system.slice/slurmstepd.scope/system\n", None),  # the daemon itself, no job
        ("0::/kubepods.slice/job_5/x\n", None),  # `job_` outside a Slurm path
    ],
)
def test_slurm_job_id_from_cgroup_v1_and_v2(text, job_id):
    assert slurm_job_id_from_cgroup(text) == job_id


def test_slurm_job_id_from_environ():
    assert slurm_job_id_from_environ(b"HOME=/root\0SLURM_JOB_ID=321\0PATH=/bin\0") == "321"
    assert slurm_job_id_from_environ(b"SLURM_JOB_ID=5") == "5"
    assert slurm_job_id_from_environ(b"MY_SLURM_JOB_ID=9\0PATH=/bin\0") is None


def test_owner_of_this_process_from_the_real_proc():
    owner = ProcessInfo().owner(os.getpid())
    assert owner.user == ME


def test_owner_of_a_missing_process_is_null(tmp_path):
    owner = ProcessInfo(proc_root=tmp_path).owner(12345)
    assert (owner.user, owner.job_id) == (None, None)


def test_job_id_from_cgroup_else_environment(tmp_path):
    in_cgroup = tmp_path / "100"
    in_cgroup.mkdir()
    (in_cgroup / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_55/step_0\n")
    (in_cgroup / "environ").write_bytes(b"SLURM_JOB_ID=999\0")
    env_only = tmp_path / "200"
    env_only.mkdir()
    (env_only / "cgroup").write_text("0::/user.slice/user-0.slice\n")
    (env_only / "environ").write_bytes(b"A=1\0SLURM_JOB_ID=66\0")
    info = ProcessInfo(proc_root=tmp_path)
    assert info.owner(100).job_id == "55"  # the cgroup wins over the environment
    assert info.owner(200).job_id == "66"
    assert info.owner(100).user == ME


def test_owners_are_cached_while_seen_and_forgotten_after(tmp_path):
    proc = tmp_path / "300"
    proc.mkdir()
    (proc / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_1/step_0\n")
    info = ProcessInfo(proc_root=tmp_path)
    assert info.owner(300).job_id == "1"
    info.sweep()
    (proc / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_2/step_0\n")
    assert info.owner(300).job_id == "1"  # still on the GPU: cached
    info.sweep()
    info.sweep()  # not seen during a whole tick: forgotten
    assert info.owner(300).job_id == "2"
