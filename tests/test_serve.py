"""`gpufleet serve`: its deployments, schedules, and a served run of the weekly report.

One end-to-end test uses the session's Prefect server (a real API server in a subprocess on
loopback, started by `prefect_test_harness`), runs `gpufleet serve` as a separate process
against it, and triggers the report deployment through the API, as the schedule would;
then it stops serve as Ctrl-C in its terminal does, SIGINT to its process group.
The other runs `gpufleet serve` with no server, as an operator's first try does: it starts
its own, whose scheduler creates the runs that serve executes, and stops with it; its serve
processes are stopped every other way (SIGTERM to the process, SIGINT to the process where
it was ignored, SIGINT and SIGTERM to the group) and lose their server.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from uuid import UUID

import psutil
import pytest
from prefect.client.schemas.filters import (
    DeploymentFilter,
    DeploymentFilterId,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.client.schemas.schedules import CronSchedule, IntervalSchedule
from prefect.exceptions import ObjectNotFound

from gpufleet.config import load_config
from gpufleet.flows.serve import (
    INGEST_DEPLOYMENT,
    NOTICES_CRON,
    NOTICES_DEPLOYMENT,
    REPORT_CRON,
    REPORT_DEPLOYMENT,
    build_deployments,
)
from tests import report_fixtures as fx
from tests.report_fixtures import smtp_inbox

REPO = Path(__file__).resolve().parents[1]
STOP_WITHIN_S = 5.0
REPORT_NAME = f"weekly-report/{REPORT_DEPLOYMENT}"
INGEST_NAME = f"ingest-and-build/{INGEST_DEPLOYMENT}"


def berlin_config(data_dir: Path, extra: str = "") -> Path:
    path = fx.write_config(data_dir, extra)
    path.write_text(path.read_text().replace('"UTC"', '"Europe/Berlin"'), encoding="utf-8")
    return path


def test_deployments_carry_their_schedules_and_parameters(tmp_path: Path) -> None:
    config = load_config(config_path=berlin_config(tmp_path))
    ingest, report, notices = build_deployments(config)

    assert (ingest.flow_name, ingest.name) == ("ingest-and-build", INGEST_DEPLOYMENT)
    (ingest_schedule,) = ingest.schedules or []
    assert isinstance(ingest_schedule.schedule, IntervalSchedule)
    assert ingest_schedule.schedule.interval == dt.timedelta(minutes=15)
    assert ingest.parameters == {
        "data_dir": str(tmp_path.resolve()),
        "config_path": str((tmp_path / "gpufleet.toml").resolve()),
    }

    assert (report.flow_name, report.name) == ("weekly-report", REPORT_DEPLOYMENT)
    (report_schedule,) = report.schedules or []
    assert isinstance(report_schedule.schedule, CronSchedule)
    assert report_schedule.schedule.cron == REPORT_CRON == "0 7 * * 1"
    assert report_schedule.schedule.timezone == "Europe/Berlin"
    assert report.parameters["send"] is True
    assert report.parameters["week"] is None
    assert report.entrypoint == "gpufleet.flows.report.report_flow"
    assert ingest.entrypoint == "gpufleet.flows.ingest_and_build.ingest_and_build"

    assert (notices.flow_name, notices.name) == ("idle-notices", NOTICES_DEPLOYMENT)
    assert NOTICES_DEPLOYMENT == "daily-0800"
    (notices_schedule,) = notices.schedules or []
    assert isinstance(notices_schedule.schedule, CronSchedule)
    assert notices_schedule.schedule.cron == NOTICES_CRON == "0 8 * * *"
    assert notices_schedule.schedule.timezone == "Europe/Berlin"
    assert notices.parameters == {
        "data_dir": str(tmp_path.resolve()),
        "config_path": str((tmp_path / "gpufleet.toml").resolve()),
        "day": None,
        "send": True,
    }
    assert notices.entrypoint == "gpufleet.flows.notify.idle_notices_flow"


def test_serve_builds_its_deployments_without_importing_the_engine(tmp_path: Path) -> None:
    """serve's start (and each of its restarts) pays for Prefect, not for the report's,
    ingest's or integrations' modules: those load in the flow-run process that needs them."""
    config_path = fx.write_config(
        tmp_path, '[prometheus]\nurl = "http://127.0.0.1:9090"\n[slurm]\nenabled = true\n'
    )
    code = (
        "import sys\n"
        "from gpufleet.config import load_config\n"
        "from gpufleet.flows.serve import build_deployments\n"
        f"deployments = build_deployments(load_config(config_path={str(config_path)!r}))\n"
        "engine = {'altair', 'duckdb', 'jinja2', 'polars', 'pyarrow', 'sqlglot'}\n"
        "print(len(deployments), sorted(engine & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "5 []"


def test_serve_refuses_a_dask_scheduler_without_a_prefect_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpufleet.cli import main

    config_path = fx.write_config(tmp_path, '[compute]\ndask = "tcp://dask-scheduler:8786"\n')
    monkeypatch.setattr("gpufleet.flows.serve.prefect_server_configured", lambda: False)

    assert main(["--config", str(config_path), "serve"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("gpufleet: error: [compute] dask = 'tcp://dask-scheduler:8786' ")
    assert error.count("\n") == 1 and "set PREFECT_API_URL" in error


def _wait_for_deployments(client, proc: subprocess.Popen[bytes], log: Path, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, f"gpufleet serve exited:\n{log.read_text()[-3000:]}"
        try:
            return (
                client.read_deployment_by_name(REPORT_NAME),
                client.read_deployment_by_name(INGEST_NAME),
            )
        except ObjectNotFound as exc:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"no deployments after {timeout_s} s:\n{log.read_text()}"
                ) from exc
            time.sleep(1)


@pytest.mark.slow
def test_serve_registers_the_schedules_and_runs_the_report(
    tmp_path: Path, prefect_harness: None
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    from gpufleet.flows.report import ARTIFACT_KEY

    with smtp_inbox() as (inbox, smtp_port):
        fx.make_warehouse(tmp_path)
        config_path = berlin_config(
            tmp_path,
            '[report]\nrecipients = ["ops@example.org"]\n'
            f'[smtp]\nhost = "127.0.0.1"\nport = {smtp_port}\n',
        )
        log = tmp_path / "serve.log"
        env = {
            **os.environ,
            "PREFECT_API_URL": str(PREFECT_API_URL.value()),
            "PREFECT_RUNNER_POLL_FREQUENCY": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        with log.open("wb") as output:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpufleet", "--config", str(config_path), "serve"],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its flow-run subprocesses share its process group
            )
        try:
            with get_client(sync_client=True) as client:
                report, ingest = _wait_for_deployments(client, proc, log, timeout_s=180)
                (report_schedule,) = report.schedules
                assert isinstance(report_schedule.schedule, CronSchedule)
                assert report_schedule.schedule.cron == "0 7 * * 1"
                assert report_schedule.schedule.timezone == "Europe/Berlin"
                assert report_schedule.active
                (ingest_schedule,) = ingest.schedules
                assert isinstance(ingest_schedule.schedule, IntervalSchedule)
                assert ingest_schedule.schedule.interval == dt.timedelta(minutes=15)
                assert report.parameters["send"] is True

                flow_run = run_deployment(
                    REPORT_NAME,
                    parameters={"week": fx.WEEK},
                    timeout=300,
                    poll_interval=1,
                    as_subflow=False,
                )
                assert isinstance(flow_run, FlowRun)
                assert flow_run.state is not None and flow_run.state.is_completed(), (
                    flow_run.state,
                    log.read_text()[-4000:],
                )
                artifacts = client.read_artifacts(
                    artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[ARTIFACT_KEY]))
                )
                assert flow_run.id in {artifact.flow_run_id for artifact in artifacts}
            # as Ctrl-C in its terminal stops it
            _stops_in_time(proc, log, signal.SIGINT, to_group=True, own_server=False)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

        page = tmp_path / "reports" / fx.WEEK / "index.html"
        assert page.is_file()
        assert len(inbox.envelopes) == 1  # the deployment sends (send=True)
        assert inbox.envelopes[0].rcpt_tos == ["ops@example.org"]
        assert "2026-W46" in inbox.message()["Subject"]


def test_ingest_and_build_builds_only_after_an_ingest_that_loaded_samples(
    tmp_path: Path, prefect_harness: None
) -> None:
    import duckdb

    from gpufleet.flows.ingest_and_build import ingest_and_build
    from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet

    config_path = fx.write_config(tmp_path)
    config = load_config(config_path=config_path)
    arguments = {"data_dir": str(tmp_path), "config_path": str(config_path)}

    nothing = ingest_and_build(**arguments)
    assert "0 new samples" in nothing and nothing.endswith("build: skipped, nothing new was loaded")

    spec = SimulationSpec.from_cli(
        config=config,
        gpus=8,
        gpus_per_host=8,
        week=fx.WEEK,
        start=None,
        days=1,
        interval_s=60.0,  # 11,520 samples: the build after a load is the point, not its size
        flush_s=3600.0,
        seed=3,
    )
    simulated = simulate_fleet(spec, data_dir=tmp_path)
    loaded = ingest_and_build(**arguments)
    assert simulated.rows > 0 and f" {simulated.rows:,} new samples" in loaded
    assert "\nfull build (first build)" in loaded
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        row = con.execute("select sum(gpus) from team_weekly where iso_week = ?", [fx.WEEK])
        assert (row.fetchone() or [0])[0] >= 8

    again = ingest_and_build(**arguments)
    assert again.endswith("build: skipped, nothing new was loaded")


# --- serve with no Prefect server: its own, a scheduled run, and signals -------------------

# Prefect's own settings, for the serve processes of the test below only (its server and its
# flow-run processes inherit them), so that the runs come within seconds, not minutes: the
# server's scheduler looks for schedules that need runs every 2 s (not 60: the schedule the
# test adds gets its runs at once) and puts in the next 5 of each, 30 s ahead at least (not
# up to 100 within an hour); the runner asks for due runs every second and runs one at a
# time, so the run after the first starts as soon as the first has ended.
QUICK_SCHEDULES = {
    "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
    "PREFECT_SERVER_SERVICES_SCHEDULER_MAX_RUNS": "5",
    "PREFECT_SERVER_SERVICES_SCHEDULER_MIN_SCHEDULED_TIME": "PT30S",
    "PREFECT_RUNNER_POLL_FREQUENCY": "1",
    "PREFECT_RUNNER_PROCESS_LIMIT": "1",
}
QUICK_INTERVAL = dt.timedelta(seconds=10)


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [
        process
        for process in processes
        if process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    ]


def _serve_without_server(
    config_path: Path, home: Path, log: Path, *, sigint_ignored: bool = False
) -> subprocess.Popen[bytes]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PREFECT_") or key == "PREFECT_SERVER_ANALYTICS_ENABLED"
    }
    env.update(PREFECT_HOME=str(home), **QUICK_SCHEDULES)
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "gpufleet", "--config", str(config_path), "serve"],
            cwd=config_path.parent,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # as a shell starts a background job (`gpufleet serve &` in a script)
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
            if sigint_ignored
            else None,
        )


def _serving_at(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> str:
    """The API URL serve's line names once it serves (its server up, the deployments in)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"gpufleet serve exited:\n{log.read_text()[-3000:]}"
        for line in log.read_text().splitlines():
            if line.startswith("gpufleet serve: ") and "temporary Prefect server at " in line:
                return line.split(" at ", 1)[1].split(",", 1)[0]
        time.sleep(0.5)
    raise AssertionError(f"serve did not serve within {timeout_s} s:\n{log.read_text()}")


def _stops_in_time(
    proc: subprocess.Popen[bytes],
    log: Path,
    number: signal.Signals,
    *,
    to_group: bool,
    own_server: bool = True,
) -> None:
    """Send `number` to serve (or its process group); it and all below it (its temporary
    server, where `own_server`) end in 5 s, and it exits with status 0."""
    below = psutil.Process(proc.pid).children(recursive=True)
    assert below or not own_server, "serve started no server"
    sent = time.monotonic()
    (os.killpg if to_group else os.kill)(proc.pid, number)
    try:
        status = proc.wait(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(
            f"{number.name} ignored for {STOP_WITHIN_S} s:\n{log.read_text()}"
        ) from None
    took = time.monotonic() - sent
    assert status == 0, log.read_text()[-3000:]
    assert not _alive(below), (_alive(below), log.read_text()[-3000:])
    print(f"{number.name} to the {'group' if to_group else 'process'}: ended in {took:.1f} s")


@pytest.mark.slow
def test_serve_without_a_server_runs_its_schedules_and_stops_on_signals(tmp_path: Path) -> None:
    import duckdb
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.actions import DeploymentScheduleCreate

    from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet

    data = tmp_path / "data"
    config_path = fx.write_config(data)
    config = load_config(config_path=config_path)
    spec = SimulationSpec.from_cli(
        config=config,
        gpus=8,
        gpus_per_host=8,
        week=fx.WEEK,
        start=None,
        days=1,
        interval_s=60.0,
        flush_s=3600.0,
        seed=3,
    )
    simulate_fleet(spec, data_dir=data)
    home, log = tmp_path / "prefect-home", tmp_path / "serve.log"
    home.mkdir()

    proc = _serve_without_server(config_path, home, log)
    below: list[psutil.Process] = []
    try:
        url = _serving_at(proc, log, timeout_s=240)
        below = psutil.Process(proc.pid).children(recursive=True)
        with SyncPrefectClient(api=url) as client:
            # Its server skips the registration of Prefect's block types (serve's flows use
            # none), which imports every installed Prefect collection as the server starts.
            assert client.read_block_types() == []
            deployments = {
                name: client.read_deployment_by_name(name)
                for name in (INGEST_NAME, REPORT_NAME, f"idle-notices/{NOTICES_DEPLOYMENT}")
            }

            def runs(deployment_id: UUID, *states: StateType) -> list[FlowRun]:
                return client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
                    flow_run_filter=FlowRunFilter(
                        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=list(states)))
                    ),
                )

            # The server's scheduler puts every schedule's next runs in (Prefect's own
            # temporary server has no scheduler: none would come).
            deadline = time.monotonic() + 120
            while not all(runs(d.id, StateType.SCHEDULED) for d in deployments.values()):
                assert time.monotonic() < deadline, f"no scheduled runs:\n{log.read_text()}"
                time.sleep(2)

            # A schedule every 10 s besides the 15 minutes', so that one comes in the test.
            ingest = deployments[INGEST_NAME]
            client.create_deployment_schedules(
                ingest.id,
                [
                    DeploymentScheduleCreate(
                        schedule=IntervalSchedule(interval=QUICK_INTERVAL), active=True
                    )
                ],
            )
            deadline = time.monotonic() + 300
            while not (done := runs(ingest.id, StateType.COMPLETED)):
                failed = runs(ingest.id, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED)
                assert not failed, ([run.state for run in failed], log.read_text()[-4000:])
                assert time.monotonic() < deadline, f"no completed run:\n{log.read_text()}"
                time.sleep(2)
            assert done[0].auto_scheduled, done[0]
            with duckdb.connect(str(data / "warehouse.duckdb"), read_only=True) as con:
                row = con.execute("select count(distinct gpu_uuid) from gpu_daily").fetchone()
                assert row == (8,)  # the run loaded the samples and built the models

            # Stopped while the next run is in progress: cancelled, its process ended too.
            # (A run with nothing new may end between two looks: the next one is waited for.)
            deadline = time.monotonic() + 180
            while not (
                runs(ingest.id, StateType.RUNNING)
                and len(psutil.Process(proc.pid).children()) >= 2  # the server, the run
            ):
                assert time.monotonic() < deadline, f"no second run:\n{log.read_text()}"
                time.sleep(0.5)
        _stops_in_time(proc, log, signal.SIGTERM, to_group=False)

        # Again on the same Prefect home (its database kept), stopped the other three ways:
        # SIGINT to the group is Ctrl-C on an operator's first try, where the temporary
        # server gets the signal too (the configured server's serve gets it in
        # test_serve_registers_the_schedules_and_runs_the_report).
        for number, to_group, ignored in (
            (signal.SIGINT, False, True),
            (signal.SIGINT, True, False),
            (signal.SIGTERM, True, False),
        ):
            log = tmp_path / f"serve-{number.name}-{'group' if to_group else 'process'}.log"
            proc = _serve_without_server(config_path, home, log, sigint_ignored=ignored)
            _serving_at(proc, log, timeout_s=240)
            below = psutil.Process(proc.pid).children(recursive=True)
            _stops_in_time(proc, log, number, to_group=to_group)

        # Its server killed (by the OOM killer, say): serve stops too, in one line.
        log = tmp_path / "serve-server-killed.log"
        proc = _serve_without_server(config_path, home, log)
        _serving_at(proc, log, timeout_s=240)
        below = psutil.Process(proc.pid).children(recursive=True)
        (server,) = [p for p in below if "server" in p.cmdline()]
        server.kill()
        assert proc.wait(timeout=15) == 1, log.read_text()
        last = log.read_text().splitlines()[-1]
        assert last.startswith("gpufleet: error: the temporary Prefect server ended"), last
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for process in _alive(below):
            process.kill()
