"""`gpufleet serve`: the Prefect deployments and their schedules, served from this process.

- the deployments, their schedules and the lines that list them: deployments.py;
- how it stops, within `STOP_WITHIN_S` of SIGINT or SIGTERM: stopping.py.

Runs are executed by this process (a Prefect `Runner`, as `prefect.serve` uses), against the
Prefect API that $PREFECT_API_URL names (a `prefect server start`), or without it a temporary
server of its own (gpufleet/flows/temporary_server.py) that stops with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from functools import partial
from typing import Any

from prefect.deployments.runner import RunnerDeployment
from prefect.runner import Runner
from prefect.settings import PREFECT_API_URL, temporary_settings

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.flows.deployments import (
    INGEST_DEPLOYMENT,
    NOTICES_DEPLOYMENT,
    REPORT_DEPLOYMENT,
    build_deployments,
    say_serving,
)
from gpufleet.flows.schedules import NOTICES_CRON, REPORT_CRON
from gpufleet.flows.server import prefect_server_configured
from gpufleet.flows.stopping import (
    PROCESSES_STOP_S,
    STOP_WITHIN_S,
    Stop,
    end_processes_below,
    stop_runner,
)
from gpufleet.flows.temporary_server import temporary_server

# The names the tests and docs find here.
__all__ = [
    "INGEST_DEPLOYMENT",
    "NOTICES_CRON",
    "NOTICES_DEPLOYMENT",
    "REPORT_CRON",
    "REPORT_DEPLOYMENT",
    "build_deployments",
    "serve",
]


def serve(config: Config) -> int:
    """Register the deployments and run their scheduled runs until SIGINT or SIGTERM.

    The loop is left open: what of the runner's teardown had not ended by the deadline goes
    with the process, which `gpufleet serve` ends at once."""
    configured = prefect_server_configured()
    if config.compute.scheduler and not configured:
        raise GpufleetError(
            f"[compute] dask = {config.compute.dask!r} needs a Prefect server that its workers "
            "reach, and serve's temporary one listens on 127.0.0.1 only: start one (`prefect "
            "server start --host 0.0.0.0`) and set PREFECT_API_URL here and on every worker"
        )
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(_serve(build_deployments(config), temporary=not configured))
    return 0


async def _serve(deployments: list[RunnerDeployment], *, temporary: bool) -> None:
    stop = Stop()
    stop.on_signals()
    async with contextlib.AsyncExitStack() as stack:
        server = None
        if temporary:
            stop_within = partial(stop.time_left, STOP_WITHIN_S)
            server = await stack.enter_async_context(temporary_server(stop.event, stop_within))
            if server is None:
                return  # stopped while it started
            stack.enter_context(_api_url(server.url))
        # serve pauses the schedules itself, first and within its deadline
        runner = Runner(pause_on_shutdown=False)
        ids = [await runner.aadd_deployment(deployment) for deployment in deployments]
        serving = asyncio.create_task(runner.start())
        await asyncio.sleep(0)  # runner.start has run up to its first wait ...
        stop.on_signals()  # ... and set a SIGTERM handler of its own: this one instead
        while not (runner.started or serving.done() or stop.event.is_set()):
            await asyncio.sleep(0.05)
        lost = None
        if runner.started and not stop.event.is_set():
            say_serving(deployments, server.url if server else None)
            waits: set[asyncio.Future[Any]] = {serving, asyncio.create_task(stop.event.wait())}
            if server:
                waits.add(lost := asyncio.create_task(server.process.wait()))
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():  # the runner ended on its own: its error, if any
            serving.result()
            return
        await stop_runner(runner, serving, ids, stop)
        server_pid = server.process.pid if server else None
        await asyncio.to_thread(end_processes_below, server_pid, stop.time_left(PROCESSES_STOP_S))
        if not serving.done():
            serving.cancel()
            await asyncio.wait({serving}, timeout=max(0.0, stop.time_left(PROCESSES_STOP_S)))
        if lost and lost.done():
            raise GpufleetError(
                f"the temporary Prefect server ended (exit status {lost.result()}); serve "
                "stopped with it"
            )


@contextlib.contextmanager
def _api_url(url: str) -> Iterator[None]:
    """Point this process, and the flow-run processes it starts, at the server at `url`."""
    before = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield
    finally:
        if before is None:
            del os.environ["PREFECT_API_URL"]
        else:
            os.environ["PREFECT_API_URL"] = before
