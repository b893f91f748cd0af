"""The report as an email: HTML with the charts as inline PNGs, plain text, the page attached."""

from __future__ import annotations

import secrets
import smtplib
import ssl
from collections.abc import Sequence
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import formatdate, make_msgid
from pathlib import Path

import vl_convert

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from reports.charts import NamedChart
from reports.data import WeekData
from reports.render import render_email_html, render_email_text, subject

SMTP_TIMEOUT_S = 30.0


def chart_png(chart: NamedChart) -> bytes:
    """A static PNG of the chart (mail clients run no JavaScript); no network access."""
    return vl_convert.vegalite_to_png(chart.spec(), scale=2, allowed_base_urls=[])


def build_message(
    data: WeekData,
    charts: Sequence[NamedChart],
    page_html: str,
    *,
    sender: str,
    recipients: Sequence[str],
) -> EmailMessage:
    """multipart/mixed: [alternative: [text, related: [html, PNGs]], index.html attachment]."""
    message = EmailMessage(policy=policy.SMTP)
    message["Subject"] = subject(data)
    message["From"] = sender
    if recipients:
        message["To"] = ", ".join(recipients)
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(domain="gpufleet")

    # Short Content-IDs that fit one header line: <key.random@gpufleet>.
    images = {
        chart.key: (f"<{chart.key}.{secrets.token_hex(6)}@gpufleet>", chart) for chart in charts
    }
    cids = {key: msgid[1:-1] for key, (msgid, _) in images.items()}
    message.set_content(render_email_text(data))
    message.add_alternative(render_email_html(data, list(charts), cids), subtype="html")
    html_part = message.get_body(preferencelist=("html",))
    assert html_part is not None
    for msgid, chart in images.values():
        html_part.add_related(
            chart_png(chart),
            maintype="image",
            subtype="png",
            cid=msgid,
            filename=f"{chart.key}.png",
            disposition="inline",
        )
    message.add_attachment(
        page_html.encode("utf-8"),
        maintype="text",
        subtype="html",
        filename="index.html",
    )
    return message


def read_message(path: Path) -> EmailMessage:
    """Parse a written report.eml."""
    with path.open("rb") as handle:
        parsed = BytesParser(policy=policy.default).parse(handle)
    assert isinstance(parsed, EmailMessage)
    return parsed


def send_message(config: Config, message: EmailMessage) -> tuple[str, ...]:
    """Send over SMTP as configured ([smtp], [report]); returns the recipients.

    STARTTLS (certificate checked) when `smtp.starttls`; login when `smtp.username` is set,
    with the password from $GPUFLEET_SMTP_PASSWORD. Any failure is one GpufleetError.
    """
    recipients = config.report.recipients
    if not recipients:
        raise GpufleetError(
            "cannot send the report: no recipients; set report.recipients in the config file"
        )
    smtp = config.smtp
    where = f"{smtp.host}:{smtp.port}"
    try:
        with smtplib.SMTP(smtp.host, smtp.port, timeout=SMTP_TIMEOUT_S) as client:
            client.ehlo()
            if smtp.starttls:
                client.starttls(context=ssl.create_default_context())
                client.ehlo()
            if smtp.username:
                client.login(smtp.username, smtp.password)
            refused = client.send_message(
                message, from_addr=config.report.sender, to_addrs=list(recipients)
            )
    except smtplib.SMTPAuthenticationError as exc:
        raise GpufleetError(
            f"SMTP server {where} refused the login of '{smtp.username}' "
            f"(password from $GPUFLEET_SMTP_PASSWORD): {exc.smtp_code}"
        ) from exc
    except (smtplib.SMTPException, OSError) as exc:  # ssl and timeout errors are OSErrors
        raise GpufleetError(f"cannot send the report through SMTP server {where}: {exc}") from exc
    if refused:
        raise GpufleetError(f"SMTP server {where} refused recipients: {', '.join(sorted(refused))}")
    return tuple(recipients)
