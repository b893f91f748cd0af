"""SQL text written by gpufleet itself: string literals for the few places where DuckDB
takes no parameter (COPY's path, COMMENT ON, a view's file list), and a query's text
without its comments (for finding the names it reads)."""

from __future__ import annotations

import re

_COMMENT_RE = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)


def literal(text: str) -> str:
    """`text` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def without_comments(sql: str) -> str:
    """The query with each comment replaced by a space."""
    return _COMMENT_RE.sub(" ", sql)
