"""MIG devices through NVML: their handles, what stays true of each while it exists (GPU
instance, profile, slices), and their share of the parent GPU (`mig_slice_fraction`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:
    from gpufleet.collectors.safenvml import Nvml

# The profile at the end of a MIG device's name: `NVIDIA H100 80GB HBM3 MIG 1g.10gb`.
_MIG_PROFILE = re.compile(r"\bMIG\s+(\S+)\s*$")
# GPU instance profiles (NVML_GPU_INSTANCE_PROFILE_*), asked once per GPU for its largest
# slice count: the denominator of a MIG device's `mig_slice_fraction`.
_GPU_INSTANCE_PROFILES = range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)


@dataclass(frozen=True, slots=True)
class MigDevice:
    """What stays true of a MIG device while it exists."""

    gpu_instance_id: int | None
    profile: str | None  # e.g. `1g.10gb`
    slices: int | None  # its GPU instance's slice count


def mig_handles(nvml: Nvml, uuid: str, handle: Any) -> list[tuple[str, Any]]:
    """(cache key, handle) of every MIG device of a MIG-enabled GPU, queried each tick
    (the handles go stale when instances change)."""
    count = nvml.call(uuid, "mig_count", ("nvmlDeviceGetMaxMigDeviceCount",), handle)
    handles: list[tuple[str, Any]] = []
    for slot in range(count or 0):
        mig = nvml.call(uuid, "mig_handle", ("nvmlDeviceGetMigDeviceHandleByIndex",), handle, slot)
        if mig is not None:  # an empty slot answers NotFound: skip it and go on
            handles.append((f"{uuid}/mig{slot}", mig))
    return handles


def mig_device(nvml: Nvml, uuid: str, mig: Any) -> MigDevice:
    """The GPU instance, profile and slice count of the MIG device `uuid` (handle `mig`)."""
    gi = nvml.call(uuid, "mig_gpu_instance", ("nvmlDeviceGetGpuInstanceId",), mig)
    name = nvml.call(uuid, "mig_name", ("nvmlDeviceGetName",), mig)
    match = _MIG_PROFILE.search(str(name)) if name else None
    attributes = nvml.call(uuid, "mig_attributes", ("nvmlDeviceGetAttributes",), mig)
    slices = int(attributes.gpuInstanceSliceCount) if attributes is not None else None
    return MigDevice(
        gpu_instance_id=None if gi is None else int(gi),
        profile=match.group(1) if match else None,
        slices=slices or None,
    )


def slice_fraction(device: MigDevice, max_slices: int) -> float | None:
    """The MIG device's slices over the most a GPU instance of its GPU can have (1/7 for
    a 1g profile of an H100)."""
    if not device.slices or not max_slices:
        return None
    return min(device.slices / max_slices, 1.0)


def max_slices(nvml: Nvml, uuid: str, handle: Any) -> int:
    """The largest slice count of the GPU's GPU instance profiles (7 on A100 and H100);
    0 when NVML names none."""
    largest = 0
    for profile in _GPU_INSTANCE_PROFILES:
        info = nvml.query(
            uuid,
            f"gpu_instance_profile.{profile}",
            ("nvmlDeviceGetGpuInstanceProfileInfoV", _profile_info(handle, profile, 2)),
            ("nvmlDeviceGetGpuInstanceProfileInfo", _profile_info(handle, profile, 1)),
        )
        if info is not None:
            largest = max(largest, int(info.sliceCount))
    return largest


def _profile_info(handle: Any, profile: int, version: int) -> Callable[[], Any]:
    """nvmlDeviceGetGpuInstanceProfileInfo of a profile, the structure of `version` (2: the
    ...InfoV function, new in 11.x drivers; 1: the older one)."""

    def info() -> Any:
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile, version=version)

    return info
