"""The report's CO2 per team: the week's energy of each team at each day's grid intensity
of its site (`gpufleet.carbon`: ref/grid.csv and the configuration), from `gpu_team_daily`.

Null for a team with a day of energy at a site whose intensity is unknown, and for every
team of a fleet that configures none, or of a warehouse without `gpu_team_daily`: the
report shows "–", never 0.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import polars as pl

from gpufleet.carbon import use_grid
from gpufleet.config import Config
from gpufleet.reports.queries import read
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.weeks import week_monday

TEAM_CO2 = """
with team_days as (
    select * from gpu_team_daily
    where day >= $monday and day < $next_monday
),

day_grid as (
    select cluster, day, grid_gco2_per_kwh(cluster, day) as gco2_per_kwh,
    from (select distinct cluster, day, from team_days)
),

final as (
    select
        team_days.team,
        co2_kg(team_days.energy_j, day_grid.gco2_per_kwh) as co2_kg,
    from team_days
    inner join day_grid
        on day_grid.cluster is not distinct from team_days.cluster
        and day_grid.day = team_days.day
    group by team_days.team
)

select * from final
"""


def team_co2(con: duckdb.DuckDBPyConnection, config: Config, week: str) -> pl.DataFrame:
    """Each team's kg of CO2 in the ISO week (its sites' local days), names printable."""
    if not has_table(con, "gpu_team_daily"):
        return pl.DataFrame(schema={"team": pl.String, "co2_kg": pl.Float64})
    use_grid(con, config)
    monday = week_monday(week)
    return read(con, TEAM_CO2, {"monday": monday, "next_monday": monday + dt.timedelta(days=7)})


def with_co2(teams: pl.DataFrame, co2: pl.DataFrame) -> pl.DataFrame:
    """`teams` (queries.teams) in its order with a `co2_kg` column (null: not known)."""
    return teams.join(co2, on="team", how="left", maintain_order="left")
