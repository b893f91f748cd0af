"""The report email: its structure, and sending it to a real SMTP server on loopback."""

from __future__ import annotations

import datetime as dt
import ipaddress
import logging
import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
import vl_convert
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

from gpufleet.cli import main
from gpufleet.config import load_config
from gpufleet.reports import mail
from gpufleet.reports.charts import NamedChart, build_charts
from gpufleet.reports.data import load_week
from gpufleet.reports.mail import build_message, read_message
from gpufleet.reports.render import PageLink, render_page
from gpufleet.reports.team import load_team_weeks, team_charts, write_team_emails
from gpufleet.reports.weekly import ReportFiles, write_report
from tests import report_fixtures as fx
from tests.report_fixtures import Inbox, free_port, smtp_inbox

pytestmark = pytest.mark.fleet

PASSWORD = "s3cret-Pa55"


@dataclass
class Authenticator:
    """Accepts one login and remembers every attempt."""

    attempts: list[tuple[str, str]] = field(default_factory=list)

    def __call__(
        self, server: Any, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        assert isinstance(auth_data, LoginPassword)
        login, password = auth_data.login.decode(), auth_data.password.decode()
        self.attempts.append((login, password))
        return AuthResult(success=(login, password) == ("reporter", PASSWORD), handled=False)


def check_report_message(message: EmailMessage, page: Path) -> None:
    """The structure every report email must have: text and HTML with the charts inline,
    and the page named, not attached (its chart libraries alone are over 1 MB)."""
    assert message.get_content_type() == "multipart/alternative"
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    assert "THE FLEET IN NUMBERS" in text.get_content()
    html_text = html.get_content()
    cids = re.findall(r'src="cid:([^"]+)"', html_text)
    assert len(cids) == 5
    images = {
        str(part["Content-ID"]).strip().strip("<>"): part
        for part in message.walk()
        if part.get_content_type() == "image/png"
    }
    for cid in cids:
        assert cid in images, f"cid:{cid} has no image"
        assert images[cid].get_content()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [part for part in message.iter_attachments() if part.get_filename()]
    assert str(page) in text.get_content() and str(page) in html_text


# --- the message ----------------------------------------------------------------------


def _pngs(path: Path) -> list[bytes]:
    message = read_message(path)
    return [p.get_content() for p in message.walk() if p.get_content_type() == "image/png"]


def test_a_chart_is_drawn_once_per_process_however_many_emails_show_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report written twice, the team emails twice: vl-convert draws each distinct chart
    once (the emails' PNGs the same bytes each time). The file's first test: the other tests
    of the hand-made warehouse's report find its charts drawn."""
    drawn: list[object] = []
    draw = vl_convert.vegalite_to_png

    def counted(spec: object, **options: Any) -> bytes:
        drawn.append(spec)
        return draw(spec, **options)

    monkeypatch.setattr(vl_convert, "vegalite_to_png", counted)
    mail.draw_png.cache_clear()  # what other tests of this process drew
    config, _ = fx.fixture_config(tmp_path)
    first = _pngs(write_report(config, fx.WEEK).email_path)
    assert len(first) == 5 and len(drawn) == 5
    assert _pngs(write_report(config, fx.WEEK).email_path) == first and len(drawn) == 5

    teams = load_team_weeks(config, fx.WEEK)
    team_specs = {chart.spec_json for team in teams for chart in team_charts(team)}
    emails = [_pngs(email.path) for email in write_team_emails(config, fx.WEEK)]
    assert len(team_specs) > 2 and len(drawn) == 5 + len(team_specs)
    assert [_pngs(email.path) for email in write_team_emails(config, fx.WEEK)] == emails
    assert len(drawn) == 5 + len(team_specs)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ReportFiles:
    """The hand-made warehouse's report, written once for the tests that only read it."""
    config, _ = fx.fixture_config(tmp_path_factory.mktemp("report"))
    return write_report(config, fx.WEEK)


def test_report_eml_has_html_with_inline_charts_text_and_the_page(report: ReportFiles) -> None:
    files = report
    message = read_message(files.email_path)
    assert message["Subject"] == (
        "gpufleet weekly report 2026-W46: $1,190 idle waste, "
        "$60 idle capacity (24.0 unallocated GPU-hours)"
    )
    assert message["From"] == "gpufleet@localhost"
    check_report_message(message, files.page_path)
    html = message.get_body(preferencelist=("html",))
    assert html is not None and "<script" not in html.get_content()
    related = [p for p in message.walk() if p.get_content_type() == "multipart/related"]
    assert len(related) == 1


def test_names_are_escaped_in_the_email(report: ReportFiles) -> None:
    message = read_message(report.email_path)
    html = message.get_body(preferencelist=("html",))
    text = message.get_body(preferencelist=("plain",))
    assert html is not None and text is not None
    body = html.get_content()
    assert fx.EVIL_TEAM not in body and fx.EVIL_USER not in body and "<b>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "&lt;/script&gt;&lt;b&gt;bob&lt;/b&gt;" in body
    assert fx.EVIL_TEAM in text.get_content()  # plain text shows the name as it is


def test_the_council_email_of_a_demo_sized_fleet_is_under_1_mb(tmp_path: Path) -> None:
    """128 GPUs, seven teams, a throttling rack: the charts as compressed PNGs and the page
    linked, not attached (it was 1.3 MB attached beside 1.7 MB of PNGs)."""
    fx.make_demo_sized_warehouse(tmp_path)
    config = load_config(
        config_path=fx.write_config(
            tmp_path, '[report]\npage_url = "https://fleet.example.org/gpufleet/reports/"\n'
        )
    )
    files = write_report(config, fx.WEEK)
    size = files.email_path.stat().st_size
    assert size <= 1_000_000, f"{size:,} bytes"
    assert files.page_path.stat().st_size > 1_000_000  # so it cannot travel with the email
    message = read_message(files.email_path)
    images = [p for p in message.walk() if p.get_content_type() == "image/png"]
    assert len(images) == 5
    for image in images:
        png = image.get_content()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        width = int.from_bytes(png[16:20], "big")  # IHDR: drawn at 1.5x, not 2x
        assert width < 1.5 * 1000, width
    html = message.get_body(preferencelist=("html",))
    text = message.get_body(preferencelist=("plain",))
    assert html is not None and text is not None
    url = "https://fleet.example.org/gpufleet/reports/2026-W46/index.html"
    assert f'<a href="{url}">' in html.get_content()
    assert f"The interactive report: {url}" in text.get_content()


class CountedChart:
    """An Altair chart that counts the specs made of it (Altair makes each one)."""

    def __init__(self, chart: Any) -> None:
        self.chart, self.specs = chart, 0

    def to_dict(self, **options: Any) -> dict[str, Any]:
        self.specs += 1
        return self.chart.to_dict(**options)  # type: ignore[no-any-return]


def test_the_page_and_the_email_share_each_charts_spec(tmp_path: Path) -> None:
    config, _ = fx.fixture_config(tmp_path)
    data = load_week(config, fx.WEEK)
    counted = [(chart, CountedChart(chart.chart)) for chart in build_charts(data)]
    charts = [NamedChart(chart.key, chart.title, spec) for chart, spec in counted]  # type: ignore[arg-type]
    render_page(data, charts)
    build_message(data, charts, PageLink(url=None, path="index.html"), sender="a@b", recipients=[])
    assert [spec.specs for _, spec in counted] == [1] * 5


def test_a_page_url_that_is_not_http_is_one_line(tmp_path: Path, capsys) -> None:
    fx.make_warehouse(tmp_path)
    path = fx.write_config(tmp_path, '[report]\npage_url = "file:///srv/reports"\n')
    assert main(["--config", str(path), "report", "--week", fx.WEEK]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "'report.page_url' is not an http(s) URL: 'file:///srv/reports'" in err[0]
    )


# --- sending ----------------------------------------------------------------------------


def smtp_config(tmp_path: Path, port: int, *, starttls: bool = False, username: str = "") -> Path:
    extra = (
        '[report]\nrecipients = ["ops@example.org", "finance@example.org"]\n'
        'sender = "gpufleet@example.org"\n'
        f'[smtp]\nhost = "127.0.0.1"\nport = {port}\n'
        f'starttls = {"true" if starttls else "false"}\nusername = "{username}"\n'
    )
    fx.make_warehouse(tmp_path)
    return fx.write_config(tmp_path, extra)


def test_send_delivers_the_report_to_every_recipient(
    tmp_path: Path, inbox: tuple[Inbox, int], prefect_harness: None, capsys
) -> None:
    handler, port = inbox
    config_path = smtp_config(tmp_path, port)
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK, "--send"]) == 0
    assert "sent to: ops@example.org, finance@example.org" in capsys.readouterr().out
    assert len(handler.envelopes) == 1
    envelope = handler.envelopes[0]
    assert envelope.mail_from == "gpufleet@example.org"
    assert envelope.rcpt_tos == ["ops@example.org", "finance@example.org"]
    message = handler.message()
    assert "2026-W46" in message["Subject"]
    assert message["To"] == "ops@example.org, finance@example.org"
    check_report_message(message, tmp_path / "reports" / fx.WEEK / "index.html")


def test_unreachable_server_is_one_clear_error_and_the_files_stay(
    tmp_path: Path, prefect_harness: None, capsys
) -> None:
    port = free_port()  # nothing listens there
    config_path = smtp_config(tmp_path, port)
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK, "--send"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(
        f"gpufleet: error: cannot send the report through SMTP server 127.0.0.1:{port}: "
    )
    assert (tmp_path / "reports" / fx.WEEK / "index.html").is_file()
    assert (tmp_path / "reports" / fx.WEEK / "report.eml").is_file()


def test_send_without_recipients_says_so(tmp_path: Path, prefect_harness: None, capsys) -> None:
    _, config_path = fx.fixture_config(tmp_path)
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK, "--send"]) == 1
    assert "no recipients; set report.recipients" in capsys.readouterr().err
    assert (tmp_path / "reports" / fx.WEEK / "report.eml").is_file()


# --- STARTTLS and login -----------------------------------------------------------------


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpufleet test SMTP")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "smtp-cert.pem", directory / "smtp-key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def tls_inbox(tmp_path: Path, monkeypatch) -> Iterator[tuple[Inbox, Authenticator, int]]:
    """An SMTP server that requires STARTTLS before anything and a login before mail."""
    cert, key = self_signed_certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this certificate only
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    authenticator = Authenticator()
    with smtp_inbox(
        tls_context=context,
        require_starttls=True,
        authenticator=authenticator,
        auth_required=True,
        auth_require_tls=True,
    ) as (handler, port):
        yield handler, authenticator, port


def test_starttls_and_login_with_the_password_from_the_environment(
    tmp_path: Path,
    tls_inbox: tuple[Inbox, Authenticator, int],
    prefect_harness: None,
    monkeypatch,
    capsys,
    caplog,
) -> None:
    handler, authenticator, port = tls_inbox
    monkeypatch.setenv("GPUFLEET_SMTP_PASSWORD", PASSWORD)
    config_path = smtp_config(tmp_path, port, starttls=True, username="reporter")
    caplog.set_level(logging.DEBUG)
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK, "--send"]) == 0
    assert authenticator.attempts == [("reporter", PASSWORD)]
    assert handler.tls == [True]
    assert handler.envelopes[0].rcpt_tos == ["ops@example.org", "finance@example.org"]
    assert "2026-W46" in handler.message()["Subject"]
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err + caplog.text


def test_a_refused_login_is_one_clear_error_without_the_password(
    tmp_path: Path,
    tls_inbox: tuple[Inbox, Authenticator, int],
    prefect_harness: None,
    monkeypatch,
    capsys,
    caplog,
) -> None:
    handler, authenticator, port = tls_inbox
    monkeypatch.setenv("GPUFLEET_SMTP_PASSWORD", "wrong-" + PASSWORD)
    config_path = smtp_config(tmp_path, port, starttls=True, username="reporter")
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK, "--send"]) == 1
    # smtplib tries each mechanism the server offers (PLAIN, then LOGIN)
    assert authenticator.attempts
    assert set(authenticator.attempts) == {("reporter", "wrong-" + PASSWORD)}
    assert handler.envelopes == []
    err = capsys.readouterr().err
    assert "refused the login of 'reporter'" in err.strip().splitlines()[-1]
    assert PASSWORD not in err + caplog.text


def test_starttls_checks_the_servers_certificate(
    tmp_path: Path,
    tls_inbox: tuple[Inbox, Authenticator, int],
    prefect_harness: None,
    monkeypatch,
    capsys,
) -> None:
    handler, _, port = tls_inbox
    other, _ = self_signed_certificate(tmp_path / "..")  # a certificate the server lacks
    monkeypatch.setenv("SSL_CERT_FILE", str(other))
    monkeypatch.setenv("GPUFLEET_SMTP_PASSWORD", PASSWORD)
    config_path = smtp_config(tmp_path, port, starttls=True, username="reporter")
    assert main(["--config", str(config_path), "report", "--week", fx.WEEK, "--send"]) == 1
    assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err
    assert handler.envelopes == []
