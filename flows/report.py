"""The weekly report flow: write the page and the email, publish a summary, send on request."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.weeks import last_complete_week, week_monday
from reports.mail import read_message, send_message
from reports.team import TeamEmail, send_team_emails, write_team_emails
from reports.weekly import ReportFiles, write_report

ARTIFACT_KEY = "gpufleet-weekly-report"


@dataclass(frozen=True, kw_only=True)
class ReportResult:
    """What one report run wrote and whom it mailed; `str()` is what the CLI prints."""

    files: ReportFiles
    sent_to: tuple[str, ...] = ()
    team_emails: tuple[TeamEmail, ...] = ()
    fleet_not_sent: bool = False  # --send --per-team without report.recipients

    @property
    def page_path(self) -> Path:
        return self.files.page_path

    @property
    def email_path(self) -> Path:
        return self.files.email_path

    def __str__(self) -> str:
        text = str(self.files)
        if self.sent_to:
            text += f"\n  sent to: {', '.join(self.sent_to)}"
        if self.fleet_not_sent:
            text += "\n  not sent: report.recipients is empty (team emails only)"
        if self.team_emails:
            text += "\nteam emails:\n" + "\n".join(str(email) for email in self.team_emails)
        return text


def check_week(week: str) -> str:
    """`week` if it is an ISO week like 2026-W46, else a GpufleetError."""
    try:
        week_monday(week)
    except ValueError as exc:
        raise GpufleetError(f"'{week}' is not an ISO week like 2026-W46") from exc
    return week


@task(name="write-report", cache_policy=NO_CACHE)
def write_report_task(config: Config, week: str) -> ReportFiles:
    """Read the week's marts and write index.html and report.eml."""
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
def send_report(config: Config, email_path: Path) -> tuple[str, ...]:
    """Send the written report.eml over SMTP (no retries: the failure is reported at once)."""
    return send_message(config, read_message(email_path))


@task(name="write-team-emails", cache_policy=NO_CACHE)
def write_team_emails_task(config: Config, week: str) -> tuple[TeamEmail, ...]:
    """Write each team's email to its lead under reports/<week>/teams/."""
    return tuple(write_team_emails(config, week))


@task(name="send-team-emails", cache_policy=NO_CACHE)
def send_team_emails_task(config: Config, emails: tuple[TeamEmail, ...]) -> tuple[TeamEmail, ...]:
    """Mail each written team email that has a lead (no retries, as the report)."""
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
    config = load_config(config_path=config_path, data_dir=data_dir)
    label = check_week(week) if week else last_complete_week(config.timezone)
    files = write_report_task(config, label)
    publish_summary(files)
    team_emails = write_team_emails_task(config, label) if per_team else ()
    # With team emails to send, a fleet without report.recipients is not an error.
    send_fleet = send and (bool(config.report.recipients) or not per_team)
    sent_to = send_report(config, files.email_path) if send_fleet else ()
    if send and team_emails:
        team_emails = send_team_emails_task(config, team_emails)
    return ReportResult(
        files=files,
        sent_to=sent_to,
        team_emails=team_emails,
        fleet_not_sent=send and not send_fleet,
    )


if __name__ == "__main__":
    print(report_flow())
