"""The GPU models a simulated fleet is built from: their limits, clocks, idle draw and price.

Each model's numbers are what NVML reports for that card (memory in bytes, power in W,
clocks in MHz); `prices.csv` is written from `price_glob` and `usd_per_gpu_hour`.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class GpuModel:
    name: str
    price_glob: str
    usd_per_gpu_hour: float
    mem_total_bytes: int
    power_limit_w: float
    idle_power_w: float
    power_noise_w: float  # amplitude of the tick-to-tick power noise
    sm_clock_max_mhz: int
    sm_clock_idle_mhz: int
    mem_clock_mhz: int
    has_hbm_temp: bool
    idle_mem_used_bytes: int  # what NVML reports as used with no process
    gres_type: str  # the GRES type Slurm's gres.conf gives it (`gpu:<type>:<count>`)
    has_gpm: bool = False  # NVML GPM (Hopper and newer): SM, tensor and DRAM activity


H100 = GpuModel(
    name="NVIDIA H100 80GB HBM3",
    price_glob="NVIDIA H100*",
    usd_per_gpu_hour=2.50,
    mem_total_bytes=81559 * MIB,
    power_limit_w=700.0,
    idle_power_w=72.0,
    power_noise_w=7.0,
    sm_clock_max_mhz=1980,
    sm_clock_idle_mhz=345,
    mem_clock_mhz=2619,
    has_hbm_temp=True,
    idle_mem_used_bytes=603 * MIB,
    gres_type="h100",
    has_gpm=True,
)
A100 = GpuModel(
    name="NVIDIA A100-SXM4-80GB",
    price_glob="NVIDIA A100*",
    usd_per_gpu_hour=1.60,
    mem_total_bytes=81920 * MIB,
    power_limit_w=400.0,
    idle_power_w=56.0,
    power_noise_w=4.0,
    sm_clock_max_mhz=1410,
    sm_clock_idle_mhz=210,
    mem_clock_mhz=1593,
    has_hbm_temp=True,
    idle_mem_used_bytes=421 * MIB,
    gres_type="a100",
)
L40S = GpuModel(
    name="NVIDIA L40S",
    price_glob="NVIDIA L40S*",
    usd_per_gpu_hour=0.95,
    mem_total_bytes=46068 * MIB,
    power_limit_w=350.0,
    idle_power_w=33.0,
    power_noise_w=3.0,
    sm_clock_max_mhz=2520,
    sm_clock_idle_mhz=210,
    mem_clock_mhz=9001,
    has_hbm_temp=False,
    idle_mem_used_bytes=437 * MIB,
    gres_type="l40s",
)
GPU_MODELS = (H100, A100, L40S)
