"""Read-only access for analysts: the published warehouse's marts as polars DataFrames.

`gpufleet.open("data")` returns a `ReadOnlyWarehouse`. Each call opens the published
`warehouse.duckdb` read-only, runs one query with its values as parameters, hands the
result over as a polars DataFrame (DuckDB's `.pl()`, through Arrow) and closes the file at
once, so a notebook never holds the warehouse open between calls and the scheduled
writers never have to work around it.

The query runs in the sandbox of sandbox.py (`connect_sandboxed`): a DuckDB of its own
that attaches the warehouse read-only, reads the lake through Arrow and can then read or
write no file.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import polars as pl

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.sandbox import check_read_only, connect_sandboxed, one_line
from gpufleet.sites import check_site
from gpufleet.weeks import check_week, week_bounds, week_monday

__all__ = ["ReadOnlyWarehouse", "check_read_only", "connect_sandboxed"]

Parameters = Sequence[object] | Mapping[str, object] | None
# DuckDB types that polars has none of, anywhere in a column's type (a list of intervals
# too): converting them aborts the process (a Rust panic) where no row holds a value.
_NOT_IN_POLARS = re.compile(r"\bINTERVAL\b|\bUNION\(")
# A point in time for a filter: a date is local midnight, as is a time without a zone.
Moment = dt.datetime | dt.date | str


def _site_filter(cluster: object) -> str:
    """The condition on `cluster` (a parameter) when a site is asked for: a warehouse built
    before sites has no such column, and is read as it is without one."""
    return "" if cluster is None else "and cluster = $cluster"


def _week_days(week: str) -> tuple[dt.date, dt.date]:
    """The Monday and the Sunday of an ISO week, or a GpufleetError."""
    monday = week_monday(check_week(week))
    return monday, monday + dt.timedelta(days=6)


class ReadOnlyWarehouse:
    """The marts of one data directory's published warehouse, read-only, as DataFrames."""

    def __init__(self, config: Config) -> None:
        self.config = config

    @classmethod
    def open(
        cls, data_dir: str | Path | None = None, *, config: str | Path | None = None
    ) -> ReadOnlyWarehouse:
        """The warehouse of `data_dir` (default as for the CLI: $GPUFLEET_DATA_DIR, ./data),
        with the configuration of `config` (default: `<data_dir>/gpufleet.toml` if present)."""
        loaded = load_config(
            config_path=None if config is None else str(config),
            data_dir=None if data_dir is None else str(data_dir),
        )
        if not loaded.warehouse_path.is_file():
            raise GpufleetError(
                f"{loaded.warehouse_path}: no warehouse yet; run 'gpufleet ingest' and "
                "'gpufleet build' first"
            )
        return cls(loaded)

    def __repr__(self) -> str:
        return f"ReadOnlyWarehouse({str(self.config.warehouse_path)!r})"

    def sql(self, query: str, params: Parameters = None) -> pl.DataFrame:
        """Run one read-only SQL statement (values as `?` or `$name` parameters)."""
        check_read_only(query)
        with connect_sandboxed(self.config) as con:
            try:
                # A relation hands its rows to polars through Arrow without a copy (DuckDB
                # 2's DB-API results would copy them first).
                relation = con.sql(query, params=params)
                if relation is None:
                    return pl.DataFrame()
                for name, kind in zip(relation.columns, relation.types, strict=True):
                    if _NOT_IN_POLARS.search(str(kind)):  # polars would abort, not raise
                        raise GpufleetError(
                            f"query: the result has a column polars cannot hold ({name!r} "
                            f"is {kind}); select it as text (::varchar)"
                        )
                return relation.pl()
            except duckdb.Error as exc:
                raise GpufleetError(f"query: {one_line(exc)}") from exc
            except pl.exceptions.PolarsError as exc:  # a type polars has none of (interval)
                raise GpufleetError(
                    f"query: the result has a column polars cannot hold ({one_line(exc)}); "
                    "select it as text (::varchar)"
                ) from exc

    def tables(self) -> pl.DataFrame:
        """The tables and views users query, with what each holds."""
        return self.sql(
            """
            select table_name as name, table_type as kind, comment,
            from (
                select table_name, 'table' as table_type, comment
                from duckdb_tables()
                where database_name = current_database() and schema_name = 'main'
                union all
                select view_name, 'view', comment
                from duckdb_views()
                where database_name = current_database() and schema_name = 'main'
                    and not internal
            )
            order by name
            """
        )

    # `cluster` (every method below but jobs' own): the rows of that site only
    # (docs/sites.md); None: every site.
    def team_daily(
        self, week: str | None = None, *, team: str | None = None, cluster: str | None = None
    ) -> pl.DataFrame:
        """`team_daily`: per local day, site and team (all days, or those of one ISO week)."""
        return self._by_day("team_daily", week, team, cluster, order="day, team")

    def team_weekly(
        self, week: str | None = None, *, team: str | None = None, cluster: str | None = None
    ) -> pl.DataFrame:
        """`team_weekly`: per ISO week, site and team (all weeks, or one like "2026-W47")."""
        if week is not None:
            _week_days(week)
        return self.sql(
            "select * from team_weekly "
            "where ($week is null or iso_week = $week) and ($team is null or team = $team) "
            f"{_site_filter(cluster)} order by iso_week, team",
            {"week": week, "team": team, **self._site(cluster)},
        )

    def gpu_daily(self, week: str | None = None, *, cluster: str | None = None) -> pl.DataFrame:
        """`gpu_daily`: per local day and GPU."""
        return self._by_day("gpu_daily", week, None, cluster, order="day, host, gpu_uuid")

    def host_daily(self, week: str | None = None, *, cluster: str | None = None) -> pl.DataFrame:
        """`host_daily`: per local day and host at its site."""
        return self._by_day("host_daily", week, None, cluster, order="day, host")

    def idle_episodes(
        self,
        week: str | None = None,
        *,
        team: str | None = None,
        waste_only: bool = False,
        cluster: str | None = None,
    ) -> pl.DataFrame:
        """`idle_episodes` that overlap the week (all without one), optionally only waste."""
        return self._overlapping(
            "idle_episodes",
            week,
            team,
            extra="and ($waste_only = false or is_waste)",
            params={"waste_only": waste_only, **self._site(cluster)},
        )

    def thermal_events(
        self, week: str | None = None, *, team: str | None = None, cluster: str | None = None
    ) -> pl.DataFrame:
        """`thermal_events` that overlap the week (all without one)."""
        return self._overlapping("thermal_events", week, team, params=self._site(cluster))

    def jobs(
        self,
        week: str | None = None,
        *,
        team: str | None = None,
        user: str | None = None,
        account: str | None = None,
        cluster: str | None = None,
        state: str | Sequence[str] | None = None,
        since: Moment | None = None,
        until: Moment | None = None,
    ) -> pl.DataFrame:
        """`job_efficiency`: one row per job and GPU model, each over the whole job.

        `week` ("2026-W47", local days), or `since` and `until`, keep the jobs that ran in
        that window: started before its end and not ended before its start (a running job
        has no end). A date is local midnight in the configured zone, as is a datetime
        without a zone or an ISO-8601 string without an offset. `state` is one state or
        several (`"FAILED"`, `["COMPLETED", "TIMEOUT"]`), in any case; the other filters
        match exactly. Rows come by start, then job id and GPU model.
        """
        conditions: list[str] = []
        params: dict[str, object] = {}
        windows: list[tuple[dt.datetime | None, dt.datetime | None]] = []
        if week is not None:
            _week_days(week)
            windows.append(week_bounds(week, self.config.timezone))
        windows.append((self._moment(since, "since"), self._moment(until, "until")))
        for number, (start, end) in enumerate(windows):
            if start is not None:
                conditions.append(f"(end_ts is null or end_ts > $start{number})")
                params[f"start{number}"] = start
            if end is not None:
                conditions.append(f"start_ts < $end{number}")
                params[f"end{number}"] = end
        params.update(self._site(cluster))
        if cluster is not None:
            conditions.append('"cluster" = $cluster')
        for column, value in (("team", team), ("user", user), ("account", account)):
            if value is not None:
                conditions.append(f'"{column}" = ${column}')
                params[column] = value
        if state is not None:
            states = [state] if isinstance(state, str) else list(state)
            conditions.append("list_contains($states, upper(state))")
            params["states"] = [str(one).upper() for one in states]
        where = " and ".join(conditions) or "true"
        return self.sql(
            f"select * from job_efficiency where {where} order by start_ts, job_id, gpu_name",
            params,
        )

    def _site(self, cluster: str | None) -> dict[str, object]:
        """The `cluster` parameter of `_site_filter` when a site is asked for, checked: a
        site neither configured nor in the warehouse is an error naming those that are."""
        if cluster is None:
            return {}
        with connect_sandboxed(self.config) as con:
            check_site(con, self.config, cluster)
        return {"cluster": cluster}

    def _moment(self, value: Moment | None, name: str) -> dt.datetime | None:
        """An aware datetime from a datetime, a date or an ISO-8601 string; without a zone,
        in the configured one."""
        if value is None:
            return None
        zone = ZoneInfo(self.config.timezone)
        if isinstance(value, str):
            try:
                parsed: dt.date = dt.datetime.fromisoformat(value)
            except ValueError as exc:
                raise GpufleetError(f"{name}: {value!r} is not an ISO-8601 date or time") from exc
        else:
            parsed = value
        if not isinstance(parsed, dt.datetime):
            parsed = dt.datetime.combine(parsed, dt.time())
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=zone)

    def quarantined_files(self) -> pl.DataFrame:
        """Raw files that could not be loaded, and why."""
        return self.sql("select * from quarantined_files order by quarantined_at, path")

    def _by_day(
        self, table: str, week: str | None, team: str | None, cluster: str | None, *, order: str
    ) -> pl.DataFrame:
        """The rows of a table keyed by local `day` (and `team`, when one is asked for), of
        one site when `cluster` names one."""
        first, last = _week_days(week) if week is not None else (None, None)
        params: dict[str, object] = {"first": first, "last": last, **self._site(cluster)}
        team_filter = ""
        if team is not None:  # only tables with a team column are asked for one
            team_filter, params["team"] = "and team = $team", team
        return self.sql(
            f"select * from {table} "
            f"where ($first is null or day between $first and $last) {team_filter} "
            f"{_site_filter(cluster)} order by {order}",
            params,
        )

    def _overlapping(
        self,
        table: str,
        week: str | None,
        team: str | None,
        *,
        extra: str = "",
        params: Mapping[str, object] | None = None,
    ) -> pl.DataFrame:
        start: dt.datetime | None = None
        end: dt.datetime | None = None
        if week is not None:
            _week_days(week)
            start, end = week_bounds(week, self.config.timezone)
        return self.sql(
            f"select * from {table} "
            "where ($start is null or (start_ts < $end and end_ts > $start)) "
            f"and ($team is null or team = $team) {extra} "
            f"{_site_filter((params or {}).get('cluster'))} "
            "order by start_ts, host, gpu_index",
            {"start": start, "end": end, "team": team, **(params or {})},
        )
