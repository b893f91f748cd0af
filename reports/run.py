"""One report run, as `gpufleet report` and the weekly-report flow make it: write the week's
page and email, the teams' emails on request, and send them on request.

The steps are parameters: the flow (flows/report.py) passes its Prefect tasks, so that each is
a task run of its own, and publishes the week's summary as an artifact; without a Prefect
server, the command passes nothing and runs the plain functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.reports.mail import read_message
from gpufleet.reports.sent_log import FLEET, Outgoing, Sending, refused_line, send_once
from gpufleet.reports.team import TeamEmail, send_team_emails, write_team_emails
from gpufleet.reports.weekly import ReportFiles, write_report
from gpufleet.site_zones import last_complete_fleet_week
from gpufleet.smtp import Refusal
from gpufleet.weeks import check_week, last_complete_week


@dataclass(frozen=True, kw_only=True)
class ReportResult:
    """What one report run wrote and whom it mailed; `str()` is what the CLI prints, and
    `failures` the error lines it prints after (exit status 1 when there are any)."""

    files: ReportFiles
    sent_to: tuple[str, ...] = ()
    already_sent_to: tuple[str, ...] = ()  # the fleet report went to them in an earlier run
    refused: tuple[Refusal, ...] = ()  # the fleet report's recipients the server refused
    team_emails: tuple[TeamEmail, ...] = ()
    fleet_not_sent: bool = False  # --send --per-team without report.recipients

    @property
    def page_path(self) -> Path:
        return self.files.page_path

    @property
    def email_path(self) -> Path:
        return self.files.email_path

    @property
    def failures(self) -> tuple[str, ...]:
        """One line per refused recipient of any email, naming it and the server's reply."""
        fleet = tuple(
            refused_line(f"the report for {self.files.week}", refusal) for refusal in self.refused
        )
        return fleet + tuple(line for email in self.team_emails for line in email.failures)

    def __str__(self) -> str:
        text = str(self.files)
        if self.sent_to:
            text += f"\n  sent to: {', '.join(self.sent_to)}"
        if self.already_sent_to:
            text += (
                f"\n  already sent to: {', '.join(self.already_sent_to)} "
                "(by an earlier run; not sent again)"
            )
        if self.refused:
            text += "\n  refused by the SMTP server: " + ", ".join(r.address for r in self.refused)
        if self.fleet_not_sent:
            text += "\n  not sent: report.recipients is empty (team emails only)"
        if self.team_emails:
            text += "\nteam emails:\n" + "\n".join(str(email) for email in self.team_emails)
        return text


def send_report(config: Config, files: ReportFiles) -> Sending:
    """Send the written report.eml over SMTP to those of report.recipients it has not gone
    to yet (`reports_sent`); no retries: a failure is reported at once."""
    recipients = config.report.recipients
    if not recipients:
        raise GpufleetError(
            "cannot send the report: no recipients; set report.recipients in the config file"
        )
    outgoing = Outgoing(
        email=FLEET,
        team=None,
        message=read_message(files.email_path),
        recipients=recipients,
        what="the report",
    )
    (sending,) = send_once(config, files.week, [outgoing])
    return sending


@dataclass(frozen=True, kw_only=True)
class ReportSteps:
    """The steps of a run: the plain functions unless a caller (the flow) passes others."""

    write: Callable[[Config, str], ReportFiles] = write_report
    publish: Callable[[ReportFiles], None] | None = None  # the summary, where it has a home
    write_team_emails: Callable[[Config, str], Sequence[TeamEmail]] = write_team_emails
    send: Callable[[Config, ReportFiles], Sending] = send_report
    send_team_emails: Callable[[Config, Sequence[TeamEmail]], Sequence[TeamEmail]] = (
        send_team_emails
    )


def _last_complete_week(config: Config, cluster: str | None) -> str:
    if cluster is not None:
        return last_complete_week(config.site_timezone(cluster))
    return last_complete_fleet_week(config)


def run_report(
    config: Config,
    week: str | None = None,
    *,
    send: bool = False,
    per_team: bool = False,
    steps: ReportSteps = ReportSteps(),
    cluster: str | None = None,
) -> ReportResult:
    """Render one week's report (default: the last complete week) and email it on request;
    with `per_team`, also each team's email to its lead (ref/teams.csv). A re-run sends
    only what an earlier one did not (`reports_sent`); a refused recipient does not stop
    the other emails. With `cluster`, the report of that site only (its own folder, and
    sent as the fleet's is)."""
    # the last week over at the site, or at every site for the fleet's report
    label = check_week(week) if week else _last_complete_week(config, cluster)
    files = (
        steps.write(config, label)
        if cluster is None
        else write_report(config, label, cluster=cluster)
    )
    if steps.publish is not None:
        steps.publish(files)
    team_emails = tuple(steps.write_team_emails(config, label)) if per_team else ()
    # With team emails to send, a fleet without report.recipients is not an error.
    send_fleet = send and (bool(config.report.recipients) or not per_team)
    fleet = steps.send(config, files) if send_fleet else Sending()
    if send and team_emails:
        team_emails = tuple(steps.send_team_emails(config, team_emails))
    return ReportResult(
        files=files,
        sent_to=fleet.sent_to,
        already_sent_to=fleet.already_sent_to,
        refused=fleet.refused,
        team_emails=team_emails,
        fleet_not_sent=send and not send_fleet,
    )
