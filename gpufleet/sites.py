"""The sites a warehouse knows (docs/sites.md): a site asked for by name must be one."""

from __future__ import annotations

import duckdb

from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.errors import GpufleetError

# The marts whose `cluster` names every site with data: measured GPUs, and jobs.
_SITE_TABLES = ("team_daily", "gpu_daily", "job_efficiency")


def known_sites(con: duckdb.DuckDBPyConnection, config: Config) -> list[str]:
    """The sites of the configuration ([clusters.<site>], `cluster`) and those the
    warehouse on `con` has rows of, sorted."""
    names = {site for site, _ in (*config.sites, *config.site_locations, *config.slurm_clusters)}
    if config.cluster:
        names.add(config.cluster)
    present = {
        table
        for (table,) in con.execute(
            "select distinct table_name from duckdb_columns() where database_name = "
            "current_database() and schema_name = 'main' and column_name = 'cluster' "
            "and list_contains($tables, table_name)",
            {"tables": list(_SITE_TABLES)},
        ).fetchall()
    }
    for table in sorted(present):
        rows = con.execute(f"select distinct cluster from {table} where cluster is not null")
        names.update(str(name) for (name,) in rows.fetchall())
    return sorted(names)


def check_site(con: duckdb.DuckDBPyConnection, config: Config, cluster: str) -> str:
    """`cluster` if the configuration or the warehouse knows it, else a GpufleetError
    naming the sites there are."""
    known = known_sites(con, config)
    if cluster in known:
        return cluster
    there = ", ".join(printable(name) for name in known) if known else "none"
    raise GpufleetError(f"unknown site '{printable(cluster)}': the known sites are {there}")
