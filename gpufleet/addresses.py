"""Email addresses in reference files and configuration: what counts as one.

A plain `local@domain` address (RFC 5322's dot-atom form, which is what a directory or a
scheduler exports): no display names, comments, quoted local parts or IP literals, so
that a cell holding `Alice <alice@x.org>`, `alice`, `alice@` or `a b@x.org` is refused
instead of becoming a recipient a mail server would reject or misread.
"""

from __future__ import annotations

import re

_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDRESS_RE = re.compile(rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})*")
_MAX_LENGTH = 254  # RFC 5321's limit on a forward path, less the angle brackets
_SEPARATORS_RE = re.compile(r"[\s;,]+")


def is_address(text: str) -> bool:
    """Whether `text` is one plain `local@domain` address."""
    return len(text) <= _MAX_LENGTH and _ADDRESS_RE.fullmatch(text) is not None


def split_addresses(text: str) -> tuple[str, ...]:
    """The addresses of a list separated by `;`, `,` or spaces (unchecked; empty: none)."""
    return tuple(part for part in _SEPARATORS_RE.split(text) if part)


def same_address(a: str, b: str) -> bool:
    """Whether two addresses name the same mailbox, as mail systems compare them."""
    return a.casefold() == b.casefold()
