"""The collector on Kubernetes: a GPU process whose cgroup names a pod records the pod's UID
as its job id (`k8s:<uid>`), from the paths the kubelet gives pods on cgroup v1 and v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.collectors.procinfo import ProcessInfo, k8s_job_id_from_cgroup

UID = "6f4e3b1c-2d4a-4c3e-9a1b-1234567890ab"
SLICE_UID = UID.replace("-", "_")
CID = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    "text",
    [
        # cgroup v1, cgroupfs driver (Burstable, Guaranteed), several controllers
        f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n11:cpu,cpuacct:/kubepods/burstable/"
        f"pod{UID}/{CID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{CID}\n",
        f"4:devices:/kubepods/pod{UID}/{CID}\n",
        # cgroup v1, systemd driver
        f"9:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{SLICE_UID}.slice/cri-containerd-{CID}.scope\n",
        # cgroup v2, systemd driver (Burstable; Guaranteed pods sit under kubepods.slice)
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_UID}.slice/"
        f"cri-containerd-{CID}.scope\n",
        f"0::/kubepods.slice/kubepods-pod{SLICE_UID}.slice/docker-{CID}.scope\n",
        # cgroup v2, cgroupfs driver; and as seen from another cgroup namespace
        f"0::/kubepods/besteffort/pod{UID}/{CID}\n",
        f"0::/../../kubepods-burstable-pod{SLICE_UID}.slice/cri-containerd-{CID}.scope\n",
        f"0::/../../pod{UID.upper()}/{CID}\n",
    ],
)
def test_a_pods_cgroup_gives_its_uid(text: str) -> None:
    assert k8s_job_id_from_cgroup(text) == f"k8s:{UID}"


@pytest.mark.parametrize(
    "text",
    [
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "0::/\n",
        "0::/system.slice/containerd.service\n",
        f"0::/kubepods.slice/kubepods-burstable.slice/{CID}\n",  # no pod in the path
        "0::/podman/pod-1234\n",
    ],
)
def test_other_cgroups_give_no_pod(text: str) -> None:
    assert k8s_job_id_from_cgroup(text) is None


def test_the_collector_records_a_pods_process_with_the_pod_uid(tmp_path: Path) -> None:
    in_pod = tmp_path / "200"
    in_pod.mkdir()
    (in_pod / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SLICE_UID}.slice/"
        f"cri-containerd-{CID}.scope\n"
    )
    in_job = tmp_path / "201"
    in_job.mkdir()
    (in_job / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_7/step_0\n")
    info = ProcessInfo(proc_root=tmp_path)
    assert info.owner(200).job_id == f"k8s:{UID}"
    assert info.owner(201).job_id == "7"
