"""ref/grid.csv: the carbon intensity of each site's electricity, dated.

`cluster,gco2_per_kwh,valid_from`: grams of CO2 per kWh at site `cluster` (empty: every
site, and hosts of no site) from the local day `valid_from` on, until a later row of the
same site. The undated value is the configuration's (`[clusters.<site>] grid_gco2_per_kwh`,
else the top-level `grid_gco2_per_kwh`); `gpufleet.carbon` combines the two. The file is read
as prices.csv is, and a bad line is one GpufleetError naming the file and the line.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import NamedTuple

from gpufleet.warehouse.refs.read import (
    _number,
    _read_file,
    _RefError,
    _required,
    _Row,
    _valid_from,
)

GRID_FILE = "grid.csv"
GRID_COLUMNS = ("cluster", "gco2_per_kwh", "valid_from")


class GridRow(NamedTuple):
    cluster: str | None  # the site; None: every site
    gco2_per_kwh: float  # grams of CO2 per kWh drawn
    valid_from: dt.date  # the site's local day it applies from
    line: int  # its line in the file


def read_grid(path: Path, display: str | None = None) -> tuple[GridRow, ...]:
    """ref/grid.csv's rows in file order; a site may have one row per `valid_from`."""
    seen: dict[tuple[str | None, dt.date], int] = {}

    def parse(row: _Row) -> GridRow:
        cluster = row.cells["cluster"]
        intensity = _number(row, "gco2_per_kwh")
        _required(row, "valid_from")
        valid_from = _valid_from(row)
        assert valid_from is not None
        key = (cluster, valid_from)
        if key in seen:
            site = f"site '{cluster}'" if cluster else "every site"
            raise _RefError(
                row.line,
                f"{site} has a row from {valid_from.isoformat()} on line {seen[key]} already",
            )
        seen[key] = row.line
        return GridRow(cluster, intensity, valid_from, row.line)

    return tuple(_read_file(path, GRID_COLUMNS, parse, display or str(path)))
