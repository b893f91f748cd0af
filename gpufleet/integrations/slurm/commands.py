"""Slurm's commands (`sacct`, `squeue`) run, and their output, or a saved copy of it,
opened as a stream for `stream.py`: the output is spooled to a temporary file rather than
held in memory.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from gpufleet.errors import GpufleetError

COMMAND_TIMEOUT_S = 300


def run_command(command: list[str], stack: ExitStack) -> IO[bytes]:
    """A Slurm command's stdout, spooled to a temporary file (read from its start, closed
    with `stack`); not found, failing or hanging is one line naming it."""
    name = command[0]
    out = stack.enter_context(tempfile.TemporaryFile())  # noqa: SIM115 (closed by the stack)
    try:
        done = subprocess.run(
            command,
            stdout=out,
            stderr=subprocess.PIPE,
            timeout=COMMAND_TIMEOUT_S,
            env={**os.environ, "TZ": "UTC"},  # sacct reads --starttime in TZ
        )
    except FileNotFoundError as exc:
        raise GpufleetError(
            f"{name}: not found on PATH (install Slurm's client commands, or give "
            f"--{name}-json FILE with output saved elsewhere)"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise GpufleetError(f"{name}: no answer in {COMMAND_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        out.seek(max(out.seek(0, os.SEEK_END) - 4096, 0))
        text = done.stderr.strip() or out.read().strip()
        detail = text.decode("utf-8", errors="replace").splitlines()
        raise GpufleetError(
            f"{name} exited with status {done.returncode}: {detail[-1] if detail else ''}"
        )
    out.seek(0)
    return out


def open_saved(path: Path, stack: ExitStack) -> IO[bytes]:
    """A saved output, opened to be read as a stream (closed with `stack`)."""
    try:
        return stack.enter_context(path.open("rb"))
    except OSError as exc:
        raise GpufleetError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def is_empty(stream: IO[bytes]) -> bool:
    """Whether the stream holds nothing (a command that printed nothing)."""
    empty = not stream.read(1)
    stream.seek(0)
    return empty
