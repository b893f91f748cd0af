"""`gpufleet serve`: the Prefect deployments and their schedules, served from this process.

- `ingest-and-build/every-15-minutes`: load new raw files every 15 minutes, and update the
  models (incrementally) when that ingest loaded something, both in one warehouse
  transaction, so the warehouse file is copied and published once per run;
- `weekly-report/monday-0700`: the last complete week's report, emailed, every Monday at
  07:00 in the configured time zone, or, with sites in other zones, in the zone whose week
  ends last (gpufleet/flows/schedules.py);
- `idle-notices/daily-0800`: yesterday's idle notices, sent, every day at 08:00 in the
  configured time zone; with sites in other zones, one more per zone
  (`daily-0800-America-Los_Angeles`), each at 08:00 there for the sites there;
- `import-prometheus/every-15-minutes` (when `[prometheus] url` is set): what is new in
  Prometheus, three minutes before each ingest-and-build run;
- `import-slurm/every-15-minutes` (when `[slurm] enabled = true`): Slurm's jobs as
  allocation rows, three minutes before each ingest-and-build run.

Runs are executed by this process (a Prefect `Runner`, as `prefect.serve` uses), against the
Prefect API that $PREFECT_API_URL names (a `prefect server start`), or without it a temporary
server of its own (gpufleet/flows/temporary_server.py) that stops with it.

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
import datetime as dt
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from functools import partial
from typing import Any, cast
from uuid import UUID

import psutil
from prefect.client.orchestration import get_client
from prefect.deployments.runner import EntrypointType, RunnerDeployment
from prefect.runner import Runner
from prefect.schedules import Interval
from prefect.settings import PREFECT_API_URL, temporary_settings

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.flows.import_prometheus import prometheus_deployment
from gpufleet.flows.import_slurm import slurm_deployment
from gpufleet.flows.ingest_and_build import ingest_and_build
from gpufleet.flows.notify import idle_notices_flow
from gpufleet.flows.report import report_flow
from gpufleet.flows.schedules import NOTICES_CRON as NOTICES_CRON  # the tests' and docs'
from gpufleet.flows.schedules import REPORT_CRON as REPORT_CRON
from gpufleet.flows.schedules import (
    notice_zones,
    notices_schedule,
    report_schedule,
)
from gpufleet.flows.server import prefect_server_configured
from gpufleet.flows.temporary_server import temporary_server

INGEST_EVERY = dt.timedelta(minutes=15)
INGEST_DEPLOYMENT = "every-15-minutes"
REPORT_DEPLOYMENT = "monday-0700"
NOTICES_DEPLOYMENT = "daily-0800"


def _location(config: Config) -> dict[str, Any]:
    """The parameters that point a run at this data directory and config file."""
    return {
        "data_dir": str(config.data_dir.resolve()),
        "config_path": str(config.source.resolve()) if config.source else None,
    }


def build_deployments(config: Config) -> list[RunnerDeployment]:
    """The deployments `gpufleet serve` runs, with their schedules and parameters."""
    ingest = ingest_and_build.to_deployment(
        name=INGEST_DEPLOYMENT,
        schedule=Interval(INGEST_EVERY, timezone=config.timezone),
        parameters=_location(config),
        concurrency_limit=1,
        description="Load new raw files every 15 minutes; rebuild the models when any loaded.",
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    weekly = report_schedule(config)
    report = report_flow.to_deployment(
        name=REPORT_DEPLOYMENT,
        schedule=weekly,
        parameters={**_location(config), "week": None, "send": True, "per_team": True},
        concurrency_limit=1,
        description=(
            f"Email the last complete week's report every Monday at 07:00 ({weekly.timezone})."
        ),
        tags=["gpufleet"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    built = [ingest, report]
    for zone in notice_zones(config):
        where = f" for the sites in {zone}" if zone else ""
        built.append(
            idle_notices_flow.to_deployment(
                name=_notices_name(config, zone),
                schedule=notices_schedule(config, zone),
                parameters={**_location(config), "day": None, "send": True}
                | ({"zone": zone} if zone else {}),
                concurrency_limit=1,
                description=(
                    f"Email yesterday's idle-GPU notices{where} every day at 08:00 "
                    f"({zone or config.timezone})."
                ),
                tags=["gpufleet"],
                entrypoint_type=EntrypointType.MODULE_PATH,
            )
        )
    if config.prometheus.url:
        built.append(prometheus_deployment(config, parameters=_location(config), before=ingest))
    if config.slurm.enabled:
        built.append(slurm_deployment(config, parameters=_location(config), before=ingest))
    assert all(isinstance(deployment, RunnerDeployment) for deployment in built)
    return cast(list[RunnerDeployment], built)


def _notices_name(config: Config, zone: str | None) -> str:
    """`daily-0800` for the configured zone's notices, `daily-0800-<zone>` for another's."""
    if zone is None or zone == config.timezone:
        return NOTICES_DEPLOYMENT
    return f"{NOTICES_DEPLOYMENT}-{zone.replace('/', '-')}"


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# From the signal: the schedules paused and the runs in progress cancelled by then, ...
RUNNER_STOP_S = 1.5
# ... the runs' processes that are left ended (SIGTERM, then SIGKILL), the runner's teardown
# given up, ...
PROCESSES_STOP_S = 2.5
# ... and the temporary server ended (SIGTERM, then SIGKILL). Then `gpufleet serve` exits.
STOP_WITHIN_S = 3.5

logger = logging.getLogger("gpufleet.serve")


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
    stop = _Stop()
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
            _say_serving(deployments, server.url if server else None)
            waits: set[asyncio.Future[Any]] = {serving, asyncio.create_task(stop.event.wait())}
            if server:
                waits.add(lost := asyncio.create_task(server.process.wait()))
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():  # the runner ended on its own: its error, if any
            serving.result()
            return
        await _stop_runner(runner, serving, ids, stop)
        server_pid = server.process.pid if server else None
        await asyncio.to_thread(_end_processes_below, server_pid, stop.time_left(PROCESSES_STOP_S))
        if not serving.done():
            serving.cancel()
            await asyncio.wait({serving}, timeout=max(0.0, stop.time_left(PROCESSES_STOP_S)))
        if lost and lost.done():
            raise GpufleetError(
                f"the temporary Prefect server ended (exit status {lost.result()}); serve "
                "stopped with it"
            )


async def _stop_runner(
    runner: Runner, serving: asyncio.Task[None], deployment_ids: list[UUID], stop: _Stop
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


def _end_processes_below(server_pid: int | None, timeout_s: float) -> None:
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


class _Stop:
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


def _say_serving(deployments: list[RunnerDeployment], url: str | None) -> None:
    where = (
        f"a temporary Prefect server at {url}, which stops with it"
        if url
        else f"the Prefect server at {PREFECT_API_URL.value()}"
    )
    lines = [f"gpufleet serve: {len(deployments)} deployments on {where}:"]
    for deployment in deployments:
        for schedule in deployment.schedules or []:
            lines.append(f"  {deployment.flow_name}/{deployment.name}: {_when(schedule.schedule)}")
    lines.append("SIGINT (Ctrl-C) or SIGTERM stops it.")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _when(schedule: Any) -> str:
    interval = getattr(schedule, "interval", None)
    if interval is not None:
        return f"every {interval.total_seconds() / 60:g} minutes"
    return f"cron {schedule.cron!r} ({schedule.timezone})"
