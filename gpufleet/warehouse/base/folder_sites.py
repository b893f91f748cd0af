"""A sample file's site from its folder: `host=<host>@<site>` (docs/sites.md).

The rows of a file in such a folder that name no site (a NULL or empty `cluster`) take the
folder's; a file whose rows name another site is set aside for quarantine, as one whose
times lie outside its `date=` folder's day is (`ingest/values.py`). The precedence is then
the file's column, else its folder's site, else hosts.csv's `cluster` (applied by the
models to the rows still without one).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.collectors.schema import folder_host
from gpufleet.warehouse.base.raw_tables import SAMPLE_COLUMNS
from gpufleet.warehouse.base.sql_text import literal


def folder_site(path: str) -> str | None:
    """The site the `host=` folder of a sample file's path names (relative or absolute),
    or None."""
    for part in reversed(path.split("/")[:-1]):
        if part.startswith("host="):
            return folder_host(part.removeprefix("host="))[1]
    return None


def pattern_site(pattern: str) -> str | None:
    """`folder_site` of a `literal_path` pattern (`raw_tables.py`): its one-character
    bracket classes undone first, so that a site holding `[`, `*` or `?` is the load's."""
    return folder_site(re.sub(r"\[(.)\]", r"\1", pattern, flags=re.DOTALL))


def site_reason(value: object, site: object) -> str:
    """Why a file whose row says `value` in its folder of `site` is set aside."""
    return f"column cluster: value {value} is not the site its host= folder names ({site})"


def fill_sites(rows: pa.Table, sites: Sequence[str | None], file_index: str) -> pa.Table:
    """`rows` (a `cluster` column, `file_index` naming each row's file, an index into
    `sites`) with each NULL or empty `cluster` its file's folder site."""
    if not any(sites):
        return rows
    column = rows.column("cluster")
    by_file = pa.array(sites, pa.string()).cast(column.type)
    indexes = rows.column(file_index).combine_chunks()
    own = column.combine_chunks()
    own = pc.if_else(pc.equal(own, ""), pa.scalar(None, own.type), own)  # empty text: none
    filled = pc.coalesce(own, pc.take(by_file, indexes))
    return rows.set_column(rows.schema.get_field_index("cluster"), "cluster", filled)


def site_sql(value: str, site: str) -> str:
    """SQL of the row's site: its `value` (SQL; empty text is none), else the folder's
    `site` (SQL)."""
    return f"coalesce(nullif({value}, ''), {site})"


def contract_columns_sql(present: Collection[str], site: str | None) -> list[str]:
    """The select items of the contract's sample columns read from a file (or files) of
    the folder of `site` holding the columns `present`: each cast to the contract's type
    (NULL where absent), a NULL or empty `cluster` the folder's site."""
    items = []
    for name, kind in SAMPLE_COLUMNS:
        value = f'cast("{name}" as {kind})' if name in present else f"cast(null as {kind})"
        if name == "cluster" and site is not None:
            value = site_sql(value, literal(site))
        items.append(f'{value} as "{name}"')
    return items
