"""`gpufleet serve`: its deployments, schedules, and a served run of the weekly report.

The end-to-end test uses the session's Prefect server (a real API server in a subprocess on
loopback, started by `prefect_test_harness`), runs `gpufleet serve` as a separate process
against it, and triggers the report deployment through the API, as the schedule would.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect.client.schemas.objects import FlowRun
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
            "PREFECT_RUNNER_POLL_FREQUENCY": "2",
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
                    poll_interval=2,
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
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
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
        interval_s=10.0,
        flush_s=600.0,
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
