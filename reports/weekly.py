"""Write one week's report: `<data_dir>/reports/<week>/index.html` and `report.eml` beside it."""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.reports.charts import build_charts
from gpufleet.reports.data import WeekData, load_week
from gpufleet.reports.files import write_atomically
from gpufleet.reports.mail import build_message
from gpufleet.reports.render import PageLink, render_page, subject, summary_markdown
from gpufleet.weeks import week_bounds

PAGE_NAME = "index.html"
EMAIL_NAME = "report.eml"


@dataclass(frozen=True, kw_only=True)
class ReportFiles:
    week: str
    page_path: Path
    email_path: Path
    subject: str
    has_data: bool
    summary_markdown: str
    weeks_with_data: tuple[str, ...] = ()  # the latest, newest first

    def __str__(self) -> str:
        lines = [f"report for {self.week}: {self.subject}"]
        if not self.has_data:
            lines[0] = f"report for {self.week}: {no_samples(self.week, self.weeks_with_data)}"
        lines += [f"  page:  {self.page_path}", f"  email: {self.email_path}"]
        return "\n".join(lines)


def no_samples(week: str, weeks_with_data: Sequence[str]) -> str:
    """What a report of a week without samples says about it, in one line."""
    if not weeks_with_data:
        return f"no samples in {week}: the warehouse has none for any week yet"
    return (
        f"no samples in {week}: the page and email say so "
        f"(weeks with data: {', '.join(weeks_with_data)})"
    )


def check_week_began(week: str, timezone: str, now: dt.datetime | None = None) -> None:
    """A GpufleetError when `week` begins after `now`: there is nothing to report yet."""
    start, _ = week_bounds(week, timezone)
    moment = now or dt.datetime.now(dt.UTC)
    if start > moment:
        today = moment.astimezone(start.tzinfo).date()
        raise GpufleetError(
            f"week {week} has not begun (it starts on {start:%a %d %b %Y}, today is "
            f"{today:%a %d %b %Y} in {timezone}); nothing written"
        )


def report_dir(config: Config, week: str) -> Path:
    return config.reports_dir / week


def page_link(config: Config, page_path: Path) -> PageLink:
    """Where the emails say the page is: under `report.page_url` (which serves
    `<data_dir>/reports/`) when set, else its path here."""
    url = None
    if config.report.page_url:
        relative = page_path.relative_to(config.reports_dir).as_posix()
        url = config.report.page_url.rstrip("/") + "/" + urllib.parse.quote(relative)
    return PageLink(url=url, path=str(page_path))


def write_report(
    config: Config, week: str, *, now: dt.datetime | None = None, cluster: str | None = None
) -> ReportFiles:
    """Read the week from the warehouse and write the page and the email file; a week that
    has not begun is an error, and nothing is written. With `cluster`, the report of that
    site only, in `reports/<week>/sites/<cluster>/`, its week in the site's zone."""
    check_week_began(week, config.site_timezone(cluster), now)
    data: WeekData = load_week(config, week, now=now, cluster=cluster)
    charts = build_charts(data)
    page = render_page(data, charts)
    folder = report_dir(config, week) / ("sites/" + cluster if cluster else "")
    page_path, email_path = folder / PAGE_NAME, folder / EMAIL_NAME
    message = build_message(
        data,
        charts,
        page_link(config, page_path),
        sender=config.report.sender,
        recipients=config.report.recipients,
    )
    write_atomically(page_path, page.encode("utf-8"))
    write_atomically(email_path, message.as_bytes())
    return ReportFiles(
        week=week,
        page_path=page_path,
        email_path=email_path,
        subject=subject(data),
        has_data=data.has_data,
        summary_markdown=summary_markdown(data, str(page_path)),
        weeks_with_data=tuple(data.weeks_with_data),
    )
