"""CO2 from the energy the marts hold: each site's grid intensity on each of its local days.

A site's intensity on a day (grams of CO2 per kWh) is that of its latest ref/grid.csv row
with `valid_from` on or before the day, else its `[clusters.<site>] grid_gco2_per_kwh`;
a site with neither takes, in the same way, the grid.csv rows without a site, then the
top-level `grid_gco2_per_kwh`; else it is unknown (docs/showback.md#co2).

CO2 is not held in a mart: `export showback` (`x_co2_kg`) and the weekly report compute it
from the marts' energy when they run, so a new grid.csv row or configuration value applies
to the next export without a build (a closed month keeps what it had at close).
`use_grid` gives a connection the intensities (`grid_intensity`) and two macros:
`grid_gco2_per_kwh(site, day)` and the aggregate `co2_kg(energy_j, gco2_per_kwh)`, null when
a day with energy has no intensity (a partial sum would understate it).
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa

from gpufleet.config import Config
from gpufleet.warehouse.refs.grid import GRID_FILE, read_grid

GRID_TABLE = "grid_intensity"
_SCHEMA = pa.schema(
    [
        ("grid_cluster", pa.string()),  # None: every site
        ("grid_gco2_per_kwh", pa.float64()),
        ("grid_valid_from", pa.date32()),  # None: the configuration's, before any dated row
    ]
)
# The site's own rows first, then those of every site; of those, the latest valid_from on or
# before the day (the configuration's value, undated, before every dated row).
_MACROS = """
create or replace temp macro grid_gco2_per_kwh(site, on_day) as (
    select arg_max(
        grid_gco2_per_kwh,
        {
            'is_site': grid_cluster is not null,
            'valid_from': coalesce(grid_valid_from, date '0001-01-01'),
        }
    )
    from grid_intensity
    where (grid_cluster is null or grid_cluster = site)
        and (grid_valid_from is null or grid_valid_from <= on_day)
);
create or replace temp macro co2_kg(energy_j, gco2_per_kwh) as
    case
        when bool_or(energy_j > 0 and gco2_per_kwh is null) then null
        else sum(energy_j / 3.6e6 * gco2_per_kwh) / 1000
    end;
"""


def grid_rows(config: Config) -> pa.Table:
    """The intensities: the configuration's (undated) and ref/grid.csv's rows (GpufleetError
    naming the file and line on a bad one)."""
    path = config.ref_dir / GRID_FILE
    dated = read_grid(path) if path.is_file() else ()
    undated: list[tuple[str | None, float]] = list(config.grid.sites)
    if config.grid.gco2_per_kwh is not None:
        undated.append((None, config.grid.gco2_per_kwh))
    rows: list[tuple[str | None, float, dt.date | None]] = [(s, g, None) for s, g in undated]
    rows += [(row.cluster, row.gco2_per_kwh, row.valid_from) for row in dated]
    return pa.Table.from_pylist(
        [dict(zip(_SCHEMA.names, row, strict=True)) for row in rows], schema=_SCHEMA
    )


def use_grid(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """Give `con` the intensities (`grid_intensity`) and the macros `grid_gco2_per_kwh` and
    `co2_kg`, for its session."""
    con.register(GRID_TABLE, grid_rows(config))
    con.execute(_MACROS)
