"""`gpufleet` run where a `chmod 000` folder really cannot be read, as root or not.

Root reads a folder whatever its mode (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a test
run as root would never see "permission denied". The command runs in a child that drops
both capabilities from its bounding set before it starts: the kernel then checks the mode
bits for it, root owner or not, as for anyone else.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

GPUFLEET = Path(sys.executable).parent / "gpufleet"
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH, _CAP_SETPCAP = 1, 2, 8
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the forked child


def _drop_read_override() -> None:
    """In the child, before it starts the command: no capability to read past a mode."""
    for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if _prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _may_drop() -> bool:
    """Whether this process may drop capabilities from the bounding set (CAP_SETPCAP)."""
    with open("/proc/self/status") as status:
        effective = next(line for line in status if line.startswith("CapEff:"))
    return bool(int(effective.split()[1], 16) >> _CAP_SETPCAP & 1)


def run_gpufleet(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpufleet ARGS` in a child that cannot read a folder its mode refuses."""
    root = os.geteuid() == 0
    if root and not _may_drop():
        pytest.skip("root without CAP_SETPCAP: a refused folder would read all the same")
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"PREFECT_API_URL", "GPUFLEET_CONFIG", "GPUFLEET_DATA_DIR"}
    }
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    return subprocess.run(
        [str(GPUFLEET), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=_drop_read_override if root else None,
    )
