"""The weekly report flow: `gpufleet.reports.run.run_report` with each step a task, and the week's
summary published as a Prefect artifact.

The report's modules (altair, jinja2, duckdb) are imported when a step runs, not with this
module: `gpufleet serve` imports it for the deployment alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from gpufleet.reports.run import ReportResult
    from gpufleet.reports.sent_log import Sending
    from gpufleet.reports.team import TeamEmail
    from gpufleet.reports.weekly import ReportFiles

ARTIFACT_KEY = "gpufleet-weekly-report"
__all__ = ["ARTIFACT_KEY", "RecipientsRefused", "report_flow"]


class RecipientsRefused(GpufleetError):
    """The SMTP server refused some recipients (the others got their email): the flow run
    fails with this, and `result` is what the run did, for the command to print."""

    def __init__(self, result: ReportResult) -> None:
        super().__init__("; ".join(result.failures))
        self.result = result


@task(name="write-report", cache_policy=NO_CACHE)
def write_report_task(config: Config, week: str) -> ReportFiles:
    """Read the week's marts and write index.html and report.eml."""
    from gpufleet.reports.weekly import write_report

    return write_report(config, week)


@task(name="publish-summary", cache_policy=NO_CACHE)
def publish_summary(files: ReportFiles) -> None:
    """Publish the week's summary as a Prefect markdown artifact."""
    create_markdown_artifact(
        markdown=files.summary_markdown,
        key=ARTIFACT_KEY,
        description=f"gpufleet weekly report {files.week}",
    )


@task(name="send-report", cache_policy=NO_CACHE)
def send_report_task(config: Config, files: ReportFiles) -> Sending:
    """Send the written report.eml over SMTP to whom it has not gone yet (no retries: a
    failure is reported at once)."""
    from gpufleet.reports.run import send_report

    return send_report(config, files)


@task(name="write-team-emails", cache_policy=NO_CACHE)
def write_team_emails_task(config: Config, week: str) -> tuple[TeamEmail, ...]:
    """Write each team's email to its lead under reports/<week>/teams/."""
    from gpufleet.reports.team import write_team_emails

    return tuple(write_team_emails(config, week))


@task(name="send-team-emails", cache_policy=NO_CACHE)
def send_team_emails_task(config: Config, emails: Sequence[TeamEmail]) -> tuple[TeamEmail, ...]:
    """Mail each written team email that has a lead (no retries, as the report)."""
    from gpufleet.reports.team import send_team_emails

    return tuple(send_team_emails(config, emails))


@flow(name="weekly-report", log_prints=False)
def report_flow(
    data_dir: str = "data",
    config_path: str | None = None,
    week: str | None = None,
    send: bool = False,
    per_team: bool = False,
) -> ReportResult:
    """Render one week's report (default: the last complete week) and email it on request;
    with `per_team`, also each team's email to its lead (ref/teams.csv)."""
    from gpufleet.reports.run import ReportSteps, run_report

    config = load_config(config_path=config_path, data_dir=data_dir)
    steps = ReportSteps(
        write=write_report_task,
        publish=publish_summary,
        write_team_emails=write_team_emails_task,
        send=send_report_task,
        send_team_emails=send_team_emails_task,
    )
    result = run_report(config, week, send=send, per_team=per_team, steps=steps)
    if result.failures:  # refused recipients: the others went out, and the run fails visibly
        refused = RecipientsRefused(result)
        return Failed(message=str(refused), data=refused)  # type: ignore[return-value]
    return result


if __name__ == "__main__":
    print(report_flow())
