"""Handing an email to the configured SMTP server ([smtp]): the one place that talks SMTP.

The weekly report (reports/mail.py) and the idle notices (gpufleet/notices) both send
through `deliver`; it imports nothing of the report, so a notice does not load Altair.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Sequence
from email.message import EmailMessage

from gpufleet.config import Config
from gpufleet.errors import GpufleetError

SMTP_TIMEOUT_S = 30.0


def deliver(
    config: Config,
    message: EmailMessage,
    *,
    sender: str,
    recipients: Sequence[str],
    what: str,
) -> tuple[str, ...]:
    """Send `message` from `sender` to `recipients` (the envelope); returns the recipients.

    STARTTLS (certificate checked) when `smtp.starttls`; login when `smtp.username` is set,
    with the password from $GPUFLEET_SMTP_PASSWORD. Any failure is one GpufleetError that
    names `what` was being sent ("the report").
    """
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
            refused = client.send_message(message, from_addr=sender, to_addrs=list(recipients))
    except smtplib.SMTPAuthenticationError as exc:
        raise GpufleetError(
            f"SMTP server {where} refused the login of '{smtp.username}' "
            f"(password from $GPUFLEET_SMTP_PASSWORD): {exc.smtp_code}"
        ) from exc
    except (smtplib.SMTPException, OSError) as exc:  # ssl and timeout errors are OSErrors
        raise GpufleetError(f"cannot send {what} through SMTP server {where}: {exc}") from exc
    if refused:
        raise GpufleetError(f"SMTP server {where} refused recipients: {', '.join(sorted(refused))}")
    return tuple(recipients)
