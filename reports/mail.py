"""The report as an email: HTML with the charts as inline PNGs, plain text, and a link to the
interactive page (not the page itself: its inlined chart libraries alone are over 1 MB)."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import threading
from collections.abc import Callable, Sequence
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import formatdate, make_msgid
from pathlib import Path

import cachetools
import vl_convert
from PIL import Image

from gpufleet.reports.charts import NamedChart
from gpufleet.reports.data import WeekData
from gpufleet.reports.render import PageLink, render_email_html, render_email_text, subject

PNG_SCALE = 1.5  # sharp enough on a high-density screen, a quarter of the pixels of 3x
PNG_CACHE_BYTES = 32 * 2**20  # the PNGs a process keeps: a week's charts take a few hundred kB


def chart_png(chart: NamedChart) -> bytes:
    """A static PNG of the chart (mail clients run no JavaScript); drawn once per process
    for a given spec (`draw_png`)."""
    return draw_png(chart.spec_json)


@cachetools.cached(
    cachetools.LRUCache(maxsize=PNG_CACHE_BYTES, getsizeof=len),
    key=lambda spec_json: hashlib.sha256(spec_json.encode()).digest(),
    lock=threading.Lock(),
)
def draw_png(spec_json: str) -> bytes:
    """The PNG of a Vega-Lite spec, with no network access. Kept, by the spec's digest, for
    the rest of the process (the most recently used ones, up to PNG_CACHE_BYTES): the same
    chart in a second email of the process (a report written again) is not drawn again.
    vl-convert writes its PNGs barely compressed: Pillow writes them again with zlib's best
    compression (several times smaller), so a week's charts take a few hundred kB of mail."""
    drawn = vl_convert.vegalite_to_png(json.loads(spec_json), scale=PNG_SCALE, allowed_base_urls=[])
    compressed = io.BytesIO()
    with Image.open(io.BytesIO(drawn)) as image:
        image.save(compressed, format="PNG", optimize=True)
    return compressed.getvalue()


def build_message(
    data: WeekData,
    charts: Sequence[NamedChart],
    page: PageLink,
    *,
    sender: str,
    recipients: Sequence[str],
) -> EmailMessage:
    """multipart/alternative: [text, related: [html, PNGs]]; both parts link the page."""
    message = EmailMessage(policy=policy.SMTP)
    message["Subject"] = subject(data)
    message["From"] = sender
    if recipients:
        message["To"] = ", ".join(recipients)
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(domain="gpufleet")

    # quoted-printable, not base64: lines stay readable in the raw message, and the decoded
    # text has no carriage returns (base64 would carry the CRLFs of policy.SMTP)
    message.set_content(render_email_text(data, page), cte="quoted-printable")
    add_chart_images(
        message, charts, lambda cids: render_email_html(data, list(charts), cids, page)
    )
    return message


def add_chart_images(
    message: EmailMessage,
    charts: Sequence[NamedChart],
    render_html: Callable[[dict[str, str]], str],
) -> dict[str, str]:
    """Add the HTML alternative `render_html(cids)` with each chart as an inline PNG it
    references by `cid:`; returns the Content-IDs by chart key."""
    # Short Content-IDs that fit one header line: <key.random@gpufleet>.
    images = {
        chart.key: (f"<{chart.key}.{secrets.token_hex(6)}@gpufleet>", chart) for chart in charts
    }
    cids = {key: msgid[1:-1] for key, (msgid, _) in images.items()}
    message.add_alternative(render_html(cids), subtype="html")
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
    return cids


def read_message(path: Path) -> EmailMessage:
    """Parse a written report.eml."""
    with path.open("rb") as handle:
        parsed = BytesParser(policy=policy.default).parse(handle)
    assert isinstance(parsed, EmailMessage)
    return parsed
