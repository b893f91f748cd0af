"""Names in the report's rows made printable, as they are read from the marts.

Host, user, team and job names are untrusted: a collector or a CSV file may hold an escape
(ESC), a DEL, a carriage return or a line feed in one. Printed raw, such a character aborts
the chart renderer (vl-convert panics on it in the chart's SVG text), and a line break in a
name starts a line of its own in an email's text part, one that can read as a header
(`Bcc: x@evil.org`). Every string of every frame the report, the page, the emails and the
charts read goes through `printable_names` once (`gpufleet.reports.queries.read`), so each
character that is not printable shows as its escape (`\\x1b`, `\\r`, `\\n`, `\\x7f`), as
`gpufleet.console.printable` writes it on the console: a name stays recognisable and is the
same everywhere it is shown (two names that differ only so, a raw ESC and the four
characters `\\x1b`, show alike). The warehouse keeps the names as they are.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from polars.datatypes import DataTypeClass

from gpufleet.console import printable


def printable_names(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every string in it printable (`gpufleet.console.printable`), in string
    columns and inside list and struct columns alike; other values as they are."""
    changed: list[pl.Series] = []
    for column in frame.iter_columns():
        if column.dtype == pl.String:
            names = {
                name: printable(name)
                for name in column.unique().drop_nulls()
                if not name.isprintable()
            }
            if names:
                changed.append(column.replace(names))
        elif column.dtype.is_nested() and _holds_strings(column.dtype):
            values = column.to_list()
            escaped = [_printable_value(value) for value in values]
            if escaped != values:
                changed.append(pl.Series(column.name, escaped, dtype=column.dtype))
    return frame.with_columns(changed) if changed else frame


def _holds_strings(dtype: pl.DataType | DataTypeClass) -> bool:
    if dtype == pl.String:
        return True
    if isinstance(dtype, pl.List | pl.Array):
        return _holds_strings(dtype.inner)
    if isinstance(dtype, pl.Struct):
        return any(_holds_strings(field.dtype) for field in dtype.fields)
    return False


def _printable_value(value: Any) -> Any:
    """A list's or struct's value (as `Series.to_list` gives it) with its strings printable."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, list):
        return [_printable_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _printable_value(item) for key, item in value.items()}
    return value
