"""An idle notice as an email: plain text and HTML (reports/templates/idle_notice.*).

Names of users, teams, hosts and jobs come from collectors and CSV files. The episodes keep
them exact (a user's address is looked up by name); what the notice shows of them is made
printable as it is rendered, in the subject, the text part and the HTML part alike
(`gpufleet.console.printable`: a control character shows as its escape, `\\x1b`, `\\r\\n`,
as in the report, `gpufleet.reports.names`), and Jinja escapes them in the HTML part.
"""

from __future__ import annotations

import datetime as dt
import functools
from email import policy
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import jinja2

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.episode_groups import counted
from gpufleet.notices.episodes import NoticeLine, notice_lines
from gpufleet.notices.plan import NO_USER, USER, Notice

TEMPLATE = "idle_notice"
# the heading's zone where a notice's lines are in several (each line names its own)
LOCAL_AT_EACH_SITE = "each site's local day, its times in the zone each line names"


def hours(value: float) -> str:
    """GPU-hours as the notices show them: two decimals."""
    return f"{value:,.2f}"


def usd(value: float) -> str:
    """Dollars as the notices show them: `$1,234.50`."""
    return f"${value:,.2f}"


def clock(value: dt.datetime) -> str:
    """A local time as the notices show it: `2026-11-16 14:05`."""
    return value.strftime("%Y-%m-%d %H:%M")


def _escape_controls(value: object) -> object:
    """A plain string with its control characters escaped; anything else as it is."""
    return printable(value) if type(value) is str else value


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpufleet.reports", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        # Names are untrusted: a CR or LF in a user, host or team name must not start a line
        # of its own in the text part (or in the dry run's console preview).
        finalize=_escape_controls,
    )
    env.filters.update(hours=hours, usd=usd, time=clock, counted=counted)
    return env


def subject(notice: Notice) -> str:
    """The subject line: whose GPUs, which day, how much (the team's name printable)."""
    figures = f"{hours(notice.gpu_hours)} GPU-hours, {usd(notice.waste_usd)}"
    if notice.kind == USER:
        return f"gpufleet: your idle GPUs on {notice.day}: {figures}"
    return (
        f"gpufleet: idle GPUs of team {printable(notice.team)} on {notice.day}: {figures} "
        "(users without an address, jobs without a user)"
    )


def _groups(notice: Notice) -> list[tuple[str, list[NoticeLine]]]:
    """The notice's lines by user (jobs with no known user last, as `NO_USER`): a job's
    episodes that overlap in time, or are on one GPU, are one line (`notice_lines`)."""
    grouped: dict[str, list[NoticeLine]] = {}
    for line in notice_lines(notice.episodes):
        grouped.setdefault(line.user or NO_USER, []).append(line)
    return list(grouped.items())


def build_notice(notice: Notice, config: Config) -> EmailMessage:
    """multipart/alternative: the text, then the HTML; From the configured sender."""
    title = subject(notice)
    context = {
        "subject": title,
        "notice": notice,
        "groups": _groups(notice),
        "day": notice.day.isoformat(),
        # one zone: named once, in the heading; several (sites in other zones): each line's
        "timezone": notice.timezones[0] if len(notice.timezones) == 1 else LOCAL_AT_EACH_SITE,
        "zone_per_line": len(notice.timezones) > 1,
        "threshold_pct": f"{config.idle.threshold_pct:g}",
        "min_minutes": f"{config.idle.min_minutes:g} minute"
        + ("" if config.idle.min_minutes == 1 else "s"),
    }
    env = _environment()
    message = EmailMessage(policy=policy.SMTP)
    message["Subject"] = title
    message["From"] = config.report.sender
    message["To"] = notice.to
    if notice.cc:
        message["Cc"] = ", ".join(notice.cc)
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(domain="gpufleet")
    message.set_content(env.get_template(f"{TEMPLATE}.txt").render(context))
    message.add_alternative(env.get_template(f"{TEMPLATE}.html").render(context), subtype="html")
    return message
