"""CSV that a spreadsheet opens as data: no text cell is run as a formula.

A spreadsheet runs a cell that begins with `=`, `+`, `-` or `@` (and some also one that
begins with a tab or a carriage return) as a formula, so a team, host or user named
`=HYPERLINK("http://x","y")` would become a link, or worse, in the finance team's copy of a
CSV export. As OWASP's "CSV Injection" page recommends, such a text cell is written with a
single quote in front (`'=HYPERLINK(...)`), which spreadsheets show as text. Only text
cells (and header names) change: a negative number is a number, written as it is. Parquet
and JSON exports are not spreadsheets' and keep every value exact.
"""

from __future__ import annotations

import polars as pl

# What a cell must not begin with (OWASP: = + - @, tab 0x09, carriage return 0x0D).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_FORMULA_START_RE = r"^[=+\-@\t\r]"
_TEXT_TYPES = (pl.String, pl.Categorical, pl.Enum)


def defuse(text: str) -> str:
    """`text` with a single quote in front when a spreadsheet would run it."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def defuse_formulas(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each text cell and column name that begins like a formula quoted."""
    text_columns = [name for name, dtype in frame.schema.items() if isinstance(dtype, _TEXT_TYPES)]
    defused = frame.with_columns(
        pl.when(pl.col(name).cast(pl.String).str.contains(_FORMULA_START_RE))
        .then(pl.lit("'") + pl.col(name).cast(pl.String))
        .otherwise(pl.col(name).cast(pl.String))
        .alias(name)
        for name in text_columns
    )
    return defused.rename({name: defuse(name) for name in frame.columns if defuse(name) != name})
