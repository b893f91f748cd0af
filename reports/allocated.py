"""The week's GPU-hours allocated on nodes without a collector (the alloc_only_daily mart):
the data-quality section shows them apart from what was measured."""

from __future__ import annotations

from typing import NamedTuple

import duckdb

from gpufleet.integrations.slurm.nodes import compact_hostlist
from gpufleet.warehouse.base.catalog import has_table


class AllocOnly(NamedTuple):
    nodes: int  # hosts with allocated-only hours in the week
    hosts: str  # their names as a Slurm host list (gpu[01-03])
    gpu_hours: float  # allocated there, not measured


def alloc_only_week(
    con: duckdb.DuckDBPyConnection, week: str, cluster: str | None
) -> AllocOnly | None:
    """The nodes with allocated-only GPU-hours in `week` (of `cluster`; None: every site);
    None when the warehouse has no alloc_only_daily (built by an older release)."""
    if not has_table(con, "alloc_only_daily"):
        return None
    rows = con.execute(
        """
        select host, sum(alloc_gpu_hours),
        from alloc_only_daily
        where iso_week = $week and ($cluster is null or cluster = $cluster)
        group by host
        """,
        {"week": week, "cluster": cluster},
    ).fetchall()
    names = [str(host) for host, _ in rows if host is not None]
    return AllocOnly(
        nodes=len(rows),
        hosts=compact_hostlist(names) + (", a job with no node" if len(names) < len(rows) else ""),
        gpu_hours=sum(float(hours) for _, hours in rows),
    )
