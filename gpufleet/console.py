"""Names from outside gpufleet, made safe to print on one line of its output.

File, host, user and team names come from collectors, CSV files and schedulers. Printed as
they are, a name holding a line feed would forge a line of gpufleet's output or log, and a
carriage return or an escape sequence would overwrite one on a terminal (log-line
injection). `printable` writes each character Python does not call printable (controls,
line and paragraph separators, bidirectional overrides) as its escape: `\\n`, `\\r`, `\\x1b`,
`\\u2028`. The report, its emails and the idle notices show names the same way
(`gpufleet.reports.names`); the warehouse and the exports keep them exact.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: object) -> str:
    """`text` (its `str()`) with every character that is not printable escaped."""
    value = str(text)
    if value.isprintable():
        return value
    return "".join(char if char.isprintable() else _escape(char) for char in value)


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable_lines(text: object) -> str:
    """`text` with each of its lines printable: its own line breaks kept, a name's escaped
    (for multi-line summaries that hold names)."""
    return "\n".join(printable(line) for line in str(text).split("\n"))
