"""Handing an email to the configured SMTP server ([smtp]): the one place that talks SMTP.

The weekly report and the team emails (`gpufleet.reports`) and the idle notices
(`gpufleet.notices`) all send through `deliver`: it sits below both and imports neither, so
a notice does not load Altair.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from typing import NamedTuple

from gpufleet.config import Config
from gpufleet.errors import GpufleetError

SMTP_TIMEOUT_S = 30.0
_SERVER_CLOSING = 421  # the server is going away: nothing more is sent, whatever was asked


class Refusal(NamedTuple):
    """A recipient the SMTP server would not take the message for, and its reply."""

    address: str
    reply: str  # as the server wrote it, on one line: "550 5.1.1 no such mailbox"


@dataclass(frozen=True)
class Delivery:
    """What the server did with one message: the recipients it accepted and those it
    refused (at RCPT TO, or the message itself after DATA: then every recipient)."""

    accepted: tuple[str, ...]
    refused: tuple[Refusal, ...] = ()


def _reply(code: int, text: bytes | str) -> str:
    words = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return " ".join([str(code), *words.split()])


def _refusals(refused: Mapping[str, tuple[int, bytes]]) -> tuple[Refusal, ...]:
    return tuple(Refusal(address, _reply(code, text)) for address, (code, text) in refused.items())


def deliver(
    config: Config,
    message: EmailMessage,
    *,
    sender: str,
    recipients: Sequence[str],
    what: str,
) -> Delivery:
    """Send `message` from `sender` to `recipients` (the envelope); returns whom the server
    accepted it for and whom it refused, with its reply.

    A refused recipient, or a message refused after DATA, is an answer, not an error: the
    caller records it and goes on with its other messages. STARTTLS (certificate checked)
    when `smtp.starttls`; login when `smtp.username` is set, with the password from
    $GPUFLEET_SMTP_PASSWORD. Anything else that fails (no connection, TLS, login, the
    sender refused, the server closing) is one GpufleetError that names `what` was being
    sent ("the report"): the next message would fail the same way.
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
            try:
                refused = _refusals(
                    client.send_message(message, from_addr=sender, to_addrs=list(recipients))
                )
            except smtplib.SMTPRecipientsRefused as exc:  # every recipient, or the server left
                if any(code == _SERVER_CLOSING for code, _ in exc.recipients.values()):
                    raise
                refused = _refusals(exc.recipients)
            except smtplib.SMTPDataError as exc:  # the message itself, for everyone
                if exc.smtp_code == _SERVER_CLOSING:
                    raise
                reply = _reply(exc.smtp_code, exc.smtp_error)
                refused = tuple(Refusal(address, reply) for address in recipients)
    except smtplib.SMTPAuthenticationError as exc:
        raise GpufleetError(
            f"SMTP server {where} refused the login of '{smtp.username}' "
            f"(password from $GPUFLEET_SMTP_PASSWORD): {exc.smtp_code}"
        ) from exc
    except (smtplib.SMTPException, OSError) as exc:  # ssl and timeout errors are OSErrors
        raise GpufleetError(f"cannot send {what} through SMTP server {where}: {exc}") from exc
    gone = {refusal.address for refusal in refused}
    return Delivery(
        accepted=tuple(address for address in recipients if address not in gone),
        refused=refused,
    )
