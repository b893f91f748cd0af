"""Write one week's report: `<data_dir>/reports/<week>/index.html` and `report.eml` beside it."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpufleet.config import Config
from gpufleet.reports.charts import build_charts
from gpufleet.reports.data import WeekData, load_week
from gpufleet.reports.mail import build_message
from gpufleet.reports.render import render_page, subject, summary_markdown

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

    def __str__(self) -> str:
        lines = [f"report for {self.week}: {self.subject}"]
        if not self.has_data:
            lines.append(f"  (no data for week {self.week})")
        lines += [f"  page:  {self.page_path}", f"  email: {self.email_path}"]
        return "\n".join(lines)


def write_atomically(path: Path, content: bytes) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(handle, 0o644)
        with os.fdopen(handle, "wb") as file:
            file.write(content)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def report_dir(config: Config, week: str) -> Path:
    return config.reports_dir / week


def write_report(config: Config, week: str, *, now: dt.datetime | None = None) -> ReportFiles:
    """Read the week from the warehouse and write the page and the email file."""
    data: WeekData = load_week(config, week, now=now)
    charts = build_charts(data)
    page = render_page(data, charts)
    message = build_message(
        data, charts, page, sender=config.report.sender, recipients=config.report.recipients
    )
    folder = report_dir(config, week)
    page_path, email_path = folder / PAGE_NAME, folder / EMAIL_NAME
    write_atomically(page_path, page.encode("utf-8"))
    write_atomically(email_path, message.as_bytes())
    return ReportFiles(
        week=week,
        page_path=page_path,
        email_path=email_path,
        subject=subject(data),
        has_data=data.has_data,
        summary_markdown=summary_markdown(data, str(page_path)),
    )
