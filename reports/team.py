"""The weekly email to each team's lead: the team's numbers, its costliest waste by user and
job, its utilization heatmap and its waste over 8 weeks, as a static email (charts as
`cid:` PNGs, like the fleet email), written to `reports/<week>/teams/` and sent on request.

The leads come from ref/teams.csv (table `ref_teams`); a team without a lead gets no email.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import zoneinfo
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, getaddresses, make_msgid
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpufleet.config import Config
from gpufleet.episode_groups import counted
from gpufleet.errors import GpufleetError
from gpufleet.reports import health, queries
from gpufleet.reports.charts import NamedChart, utilization_heatmap, waste_trend
from gpufleet.reports.data import MART_TABLES, local
from gpufleet.reports.files import write_atomically
from gpufleet.reports.mail import add_chart_images, read_message
from gpufleet.reports.records import KPIS, Kpi
from gpufleet.reports.render import format_usd, render_template
from gpufleet.reports.sent_log import TEAM, Outgoing, refused_line, send_once
from gpufleet.reports.sites import site_views
from gpufleet.reports.team_episodes import WasteGroup, costliest_groups, week_episodes
from gpufleet.reports.weekly import report_dir
from gpufleet.smtp import Refusal
from gpufleet.warehouse.publish import connect_read_only
from gpufleet.weeks import previous_week, week_bounds

TEAMS_FOLDER = "teams"
# The models' stand-ins for "no team": nobody leads them, so no email is written for them.
NOT_TEAMS = frozenset({"(unallocated)", "(unmapped)"})
TOP_USERS = 10
# The headline figures a team's row of team_weekly holds (see reports.records.KPIS).
TEAM_KPIS = tuple(spec for spec in KPIS if spec.key not in {"thermal_events", "throttled_minutes"})
_TEAM_KPI_COLUMNS = {"gpus_seen": "gpus", "coverage_pct": None}


@dataclass(frozen=True, kw_only=True)
class TeamWeek:
    """One team's week as its lead's email shows it."""

    team: str
    week: str
    previous_week: str
    timezone: str
    start: dt.datetime
    end: dt.datetime
    generated_at: dt.datetime
    kpis: list[Kpi]
    waste_usd: float
    waste_groups: tuple[WasteGroup, ...]  # its costliest waste of the week, a job's in one
    by_user: pl.DataFrame  # its waste of the week per user and job
    heatmap: pl.DataFrame  # its GPU-hours by local day and hour
    trend: pl.DataFrame  # its team_weekly rows of the 8 weeks up to this one
    lead_email: str | None = None
    cc: tuple[str, ...] = field(default_factory=tuple)
    # its row of health.how_well (utilization, SM and tensor activity); None: not measured
    activity: Mapping[str, Any] | None = None

    @property
    def last_day(self) -> dt.date:
        return (self.end - dt.timedelta(days=1)).date()

    @property
    def top_users(self) -> pl.DataFrame:
        """The costliest TOP_USERS rows of `by_user`."""
        return self.by_user.head(TOP_USERS)

    @property
    def other_users(self) -> dict[str, float] | None:
        """What the rows after the top ones add up to (None when there are none), so the
        table adds up to the team's waste."""
        rest = self.by_user.slice(TOP_USERS)
        if rest.is_empty():
            return None
        return {
            "rows": float(rest.height),
            "waste_gpu_hours": float(rest["waste_gpu_hours"].sum()),
            "waste_usd": float(rest["waste_usd"].sum()),
        }

    @property
    def subject(self) -> str:
        # A name with a line break must not reach the header as one.
        team = " ".join(self.team.split())
        return (
            f"gpufleet weekly report {self.week} for team {team}: "
            f"{format_usd(self.waste_usd)} idle waste"
        )


@dataclass(frozen=True, kw_only=True)
class TeamEmail:
    """One team's written email file, and to whom it went."""

    team: str
    week: str
    path: Path
    lead_email: str | None
    sent_to: tuple[str, ...] = ()
    already_sent_to: tuple[str, ...] = ()  # by an earlier run: not sent again
    refused: tuple[Refusal, ...] = ()  # by the SMTP server, with its reply

    @property
    def failures(self) -> tuple[str, ...]:
        """One error line per refused recipient."""
        team = " ".join(self.team.split())  # one line, whatever the name holds
        what = f"team {team}'s email for {self.week}"
        return tuple(refused_line(what, refusal) for refusal in self.refused)

    def __str__(self) -> str:
        done = [
            f"{label} {', '.join(addresses)}"
            for label, addresses in (
                ("sent to", self.sent_to),
                ("already sent to", self.already_sent_to),
                ("refused by the SMTP server:", tuple(r.address for r in self.refused)),
            )
            if addresses
        ]
        if done:
            return f"  {self.team}: {self.path} ({'; '.join(done)})"
        if self.lead_email is None:
            return f"  {self.team}: {self.path} (no lead in ref/teams.csv: not sent)"
        return f"  {self.team}: {self.path} (for {self.lead_email})"


def _team_kpis(rows: pl.DataFrame, week: str, before: str) -> list[Kpi]:
    """The team's headline numbers from its team_weekly rows of `week` and the week before."""
    by_week: dict[str, Mapping[str, Any]] = {
        row["iso_week"]: row for row in rows.iter_rows(named=True)
    }
    this, last = by_week.get(week, {}), by_week.get(before)

    def figure(row: Mapping[str, Any] | None, key: str) -> float | None:
        column = _TEAM_KPI_COLUMNS.get(key, key)
        return None if row is None or column is None else row.get(column)

    return [
        Kpi(
            key=spec.key,
            label=spec.label,
            kind=spec.kind,
            value=figure(this, spec.key),
            previous=figure(last, spec.key),
            lower_is_better=spec.lower_is_better,
        )
        for spec in TEAM_KPIS
        if _TEAM_KPI_COLUMNS.get(spec.key, spec.key) is not None
    ]


def load_team_weeks(config: Config, week: str, *, now: dt.datetime | None = None) -> list[TeamWeek]:
    """Every team with samples in `week` (the costliest first), read once, split by team."""
    tz = config.timezone
    start, end = week_bounds(week, tz)
    before = previous_week(week)
    con = connect_read_only(config, tables=MART_TABLES)
    try:
        site_views(con, None)  # a team's figures over all its sites
        weeks = queries.team_weeks(con, week)
        episodes = local(week_episodes(con, week), tz)
        by_user = health.with_job_activity(queries.waste_by_user_and_job(con, week), con)
        how_well = health.how_well(con, week)
        heatmap = queries.heatmap(con, start, end)
        trend = queries.waste_trend(con, week)
        contacts = {row["team"]: row for row in queries.team_contacts(con).iter_rows(named=True)}
    except duckdb.Error as exc:
        raise GpufleetError(f"{config.warehouse_path}: cannot read the teams' week: {exc}") from exc
    finally:
        con.close()
    generated_at = (now or dt.datetime.now(dt.UTC)).astimezone(zoneinfo.ZoneInfo(tz))
    this_week = weeks.filter(
        (pl.col("iso_week") == week) & ~pl.col("team").is_in(list(NOT_TEAMS))
    ).sort(["waste_usd", "team"], descending=[True, False])
    teams: list[TeamWeek] = []
    for team, waste in this_week.select("team", "waste_usd").iter_rows():
        mine = pl.col("team") == team
        contact = contacts.get(team) or {}
        teams.append(
            TeamWeek(
                team=team,
                week=week,
                previous_week=before,
                timezone=tz,
                start=start,
                end=end,
                generated_at=generated_at,
                kpis=_team_kpis(weeks.filter(mine), week, before),
                waste_usd=float(waste or 0.0),
                waste_groups=costliest_groups(episodes.filter(mine)),
                by_user=by_user.filter(mine),
                heatmap=heatmap.filter(mine),
                trend=trend.filter(mine),
                lead_email=contact.get("lead_email"),
                cc=tuple(contact.get("cc") or ()),
                activity=_activity(how_well, team),
            )
        )
    return teams


def _activity(how_well: pl.DataFrame | None, team: str) -> Mapping[str, Any] | None:
    """The team's row of `how_well`, when its SM activity was measured at all."""
    rows = [] if how_well is None else how_well.filter(pl.col("team") == team).rows(named=True)
    return rows[0] if rows and rows[0]["sm_active_pct"] is not None else None


def team_charts(team: TeamWeek) -> list[NamedChart]:
    """The team's heatmap and waste trend (a chart without rows is left out)."""
    charts: list[NamedChart] = []
    if not team.heatmap.is_empty():
        title = "Utilization by day and hour"
        charts.append(NamedChart("utilization", title, utilization_heatmap(team.heatmap, title)))
    if not team.trend.is_empty():
        title = "Idle waste per week"
        charts.append(NamedChart("waste-trend", title, waste_trend(team.trend, title)))
    return charts


def build_team_message(team: TeamWeek, *, sender: str) -> EmailMessage:
    """multipart/alternative: [text, related: [html, PNGs]], to the lead, copying `cc`."""
    charts = team_charts(team)
    message = EmailMessage(policy=policy.SMTP)
    message["Subject"] = team.subject
    message["From"] = sender
    if team.lead_email:
        message["To"] = team.lead_email
    if team.cc:
        message["Cc"] = ", ".join(team.cc)
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(domain="gpufleet")
    context = {"team": team, "subject": team.subject, "kpis": team.kpis, "counted": counted}
    message.set_content(render_template("team_email.txt", **context))
    cids = add_chart_images(
        message,
        charts,
        lambda cids: render_template("team_email.html", **context, cids=cids, charts=charts),
    )
    assert set(cids) == {chart.key for chart in charts}
    return message


def team_file_name(team: str) -> str:
    """A file name for a team's email that is safe whatever the team is called."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", team).strip("._")[:40] or "team"
    return f"{readable}-{hashlib.sha256(team.encode()).hexdigest()[:8]}.eml"


def write_team_emails(
    config: Config, week: str, *, now: dt.datetime | None = None
) -> list[TeamEmail]:
    """Write each team's email under reports/<week>/teams/ (nothing is sent)."""
    folder = report_dir(config, week) / TEAMS_FOLDER
    emails: list[TeamEmail] = []
    for team in load_team_weeks(config, week, now=now):
        message = build_team_message(team, sender=config.report.sender)
        path = folder / team_file_name(team.team)
        write_atomically(path, message.as_bytes())
        emails.append(TeamEmail(team=team.team, week=week, path=path, lead_email=team.lead_email))
    return emails


def send_team_emails(config: Config, emails: Sequence[TeamEmail]) -> list[TeamEmail]:
    """Mail each written team email that has a lead, to the lead and the copied addresses
    it has not gone to yet (`reports_sent`): a refused address does not stop the others."""
    outgoing: dict[str, list[tuple[int, Outgoing]]] = {}  # by week
    for index, email in enumerate(emails):
        message = read_message(email.path)
        recipients = [*message.get_all("To", []), *message.get_all("Cc", [])]
        addresses = tuple(address for _, address in getaddresses(recipients))
        if addresses:
            item = Outgoing(
                email=TEAM,
                team=email.team,
                message=message,
                recipients=addresses,
                what=f"team {email.team}'s report",
            )
            outgoing.setdefault(email.week, []).append((index, item))
    sent = list(emails)
    for week, items in outgoing.items():
        sendings = send_once(config, week, [item for _, item in items])
        for (index, _), sending in zip(items, sendings, strict=True):
            sent[index] = replace(
                emails[index],
                sent_to=sending.sent_to,
                already_sent_to=sending.already_sent_to,
                refused=sending.refused,
            )
    return sent
