"""The Prefect server `gpufleet serve` starts when none is configured (no PREFECT_API_URL).

It is the server `prefect server start` runs, with its scheduler and other services: Prefect's
own temporary server (what a client starts without a URL) runs without them, so no schedule
would create a run, and each flow-run process would start another such server of its own.
It keeps Prefect's database (in $PREFECT_HOME unless PREFECT_API_DATABASE_CONNECTION_URL
says otherwise), so the runs' history outlives it.

It does not register Prefect's block types as it starts: that imports every installed Prefect
collection (prefect-dask, and with it Dask's distributed) to see whether their blocks have
changed, about a tenth of a start on a database it knows (0.4 to 0.5 of 4 to 5 CPU s), and
on a new database writes them all (1.5 CPU s more). serve's flows use no blocks; a client
that saves one registers its type, and a later `prefect server start` on the same database
registers them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, NamedTuple

from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    import httpx

SERVER_START_TIMEOUT_S = 120.0  # migrations of a new database on a busy host take a while
SERVER_STOP_MIN_S = 0.5  # the least time it gets to stop on SIGTERM, before SIGKILL
# Prefect's settings (prefect.settings.models.server.root), for the server's process only.
SERVER_SETTINGS = {
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START": "false",
    # else the check whether the blocks changed, which imports them, runs all the same
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION": "false",
}
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class Server(NamedTuple):
    url: str  # its API's, http://127.0.0.1:PORT/api
    process: asyncio.subprocess.Process


@contextlib.asynccontextmanager
async def temporary_server(
    stop: asyncio.Event, stop_within: Callable[[], float]
) -> AsyncIterator[Server | None]:
    """A Prefect server on a free loopback port for as long as the block runs, or None when
    `stop` was set before it answered. At the end it gets SIGTERM, and SIGKILL after
    `stop_within()` seconds (at least `SERVER_STOP_MIN_S`).

    It runs in a session of its own, so that a signal to `serve`'s process group reaches it
    only through `serve`, which stops it last; on Linux it also gets SIGTERM when `serve`
    dies without stopping it (SIGKILL)."""
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--no-ui", "--analytics-off"]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,  # its banner; its errors go to stderr
        env={**os.environ, **SERVER_SETTINGS},
        start_new_session=True,
        preexec_fn=_dies_with_parent(),
    )
    url = f"http://127.0.0.1:{port}/api"
    try:
        async with httpx.AsyncClient(timeout=2.0) as client:
            answered = await _answered(client, url, process, stop)
        yield Server(url, process) if answered else None
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), max(SERVER_STOP_MIN_S, stop_within()))
            except TimeoutError:
                process.kill()
                await process.wait()


async def _answered(
    client: httpx.AsyncClient, url: str, process: asyncio.subprocess.Process, stop: asyncio.Event
) -> bool:
    """Whether the server at `url` answered its health check before `stop` was set."""
    import httpx

    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while not stop.is_set():
        if process.returncode is not None:
            raise GpufleetError(
                f"the temporary Prefect server exited with status {process.returncode} before "
                f"it answered (its messages are above); {_START_ONE}"
            )
        if time.monotonic() > deadline:
            raise GpufleetError(
                f"the temporary Prefect server did not answer at {url} within "
                f"{SERVER_START_TIMEOUT_S:.0f} s; {_START_ONE}"
            )
        try:
            if (await client.get(f"{url}/health")).status_code == 200:
                return True
        except httpx.TransportError:  # not listening yet
            pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.25)
    return False


_START_ONE = (
    "start one with `prefect server start` and point serve at it with "
    "PREFECT_API_URL=http://127.0.0.1:4200/api"
)


def _dies_with_parent() -> Callable[[], None] | None:
    """On Linux, what the server's process runs before Prefect: ask for SIGTERM when its
    parent dies (prctl PR_SET_PDEATHSIG), so that a killed `serve` leaves no server behind."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def set_death_signal() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)

    return set_death_signal
