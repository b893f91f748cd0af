"""How `gpufleet serve` stops, by deadlines counted from SIGINT or SIGTERM.

SIGINT or SIGTERM, to the process or its group, stops it within `STOP_WITHIN_S`: the
schedules are paused, the runs in progress cancelled, and the temporary server stopped, each
within its deadline. (`prefect.serve`, which this replaces, ignores a SIGINT where the
shell that started it left SIGINT ignored, a background job; and it stops without a
deadline: a run in progress gets 30 s to end, and the server's answers are awaited with
retries, also when the server is gone.)
If the temporary server exits on its own, serve stops too, with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from uuid import UUID

import psutil
from prefect.client.orchestration import get_client
from prefect.runner import Runner

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# From the signal: the schedules paused and the runs in progress cancelled by then, ...
RUNNER_STOP_S = 1.5
# ... the runs' processes that are left ended (SIGTERM, then SIGKILL), the runner's teardown
# given up, ...
PROCESSES_STOP_S = 2.5
# ... and the temporary server ended (SIGTERM, then SIGKILL). Then `gpufleet serve` exits.
STOP_WITHIN_S = 3.5

logger = logging.getLogger("gpufleet.serve")


async def stop_runner(
    runner: Runner, serving: asyncio.Task[None], deployment_ids: list[UUID], stop: Stop
) -> None:
    """Pause the schedules, so that no run is due while serve is away, and have the runner
    cancel the runs in progress (their processes get SIGTERM at once), within `RUNNER_STOP_S`."""
    try:
        async with asyncio.timeout(stop.time_left(RUNNER_STOP_S)):
            async with get_client() as client:
                for deployment_id in deployment_ids:
                    await client.pause_deployment(deployment_id)
            if runner.started:
                await runner.astop()
                await serving
    except TimeoutError:
        logger.warning("the runner did not stop within %s s of the signal", RUNNER_STOP_S)
    except Exception as exc:  # the server gone, say: stop all the same
        logger.warning("stopping the runner failed: %s", exc)


def end_processes_below(server_pid: int | None, timeout_s: float) -> None:
    """End what still runs below this process but the temporary server: flow runs that the
    runner's cancellation (SIGTERM, then SIGKILL after 30 s) has not ended yet."""
    spared: set[psutil.Process] = set()
    if server_pid is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            server = psutil.Process(server_pid)
            spared = {server, *server.children(recursive=True)}
    below = [p for p in psutil.Process().children(recursive=True) if p not in spared]
    for process in below:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.terminate()
    _, alive = psutil.wait_procs(below, timeout=max(0.1, timeout_s))
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()


class Stop:
    """Whether SIGINT or SIGTERM came, and how long is left to a deadline counted from it."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._at: float | None = None

    def on_signals(self) -> None:
        """SIGINT and SIGTERM stop serve, SIGINT also where it was ignored (a shell's
        background job): an operator who sends it means it."""
        loop = asyncio.get_running_loop()
        for number in STOP_SIGNALS:
            loop.add_signal_handler(number, self._set)

    def _set(self) -> None:
        if self._at is None:
            self._at = time.monotonic()
        self.event.set()

    def time_left(self, deadline_s: float) -> float:
        """Seconds left to `deadline_s` after the signal (all of it before one)."""
        at = time.monotonic() if self._at is None else self._at
        return at + deadline_s - time.monotonic()
