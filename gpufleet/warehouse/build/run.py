"""`gpufleet build`: bring the marts up to date in one published warehouse transaction.

A build is incremental when it can be (only the days new samples touch are recomputed, see
`incremental/`) and full otherwise: the first build, `--full`, or a change in the
SQL, the configuration or the reference rows without `valid_from`; a change in dated
reference rows only recomputes every GPU from the earliest valid_from it touches. Either way
it ends by giving the kept days (closed months, days retention expired: `kept.py`) their
kept rows back, evicting the samples of compacted host-days from the warehouse file to the
lake (`lake/samples.py`) and expiring samples past `[retention] samples_days`
(`retention.py`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.build.data_tests import check_marts
from gpufleet.warehouse.build.fanout import FanOut
from gpufleet.warehouse.build.full import build_all_models
from gpufleet.warehouse.build.ids import forget_ids
from gpufleet.warehouse.build.incremental.run import build_incrementally
from gpufleet.warehouse.build.kept import ensure_kept_tables, reopened_since, restore_kept
from gpufleet.warehouse.build.models import (
    PERSISTENT,
    SQL_DIR,
    Model,
    apply_table_docs,
    build_order,
    count_mart_rows,
    discover_models,
    model_variables,
    prepare,
)
from gpufleet.warehouse.build.retention import after_publish, expire_samples
from gpufleet.warehouse.build.state import (
    allocations_changed,
    dated_references_since,
    ensure_state_tables,
    fingerprint,
    read_state,
    record_full_build,
    samples_load_top,
)
from gpufleet.warehouse.lake.samples import (
    evict_built_days,
    refresh_samples_view,
    samples_view_is_current,
)
from gpufleet.warehouse.publish.slots import (
    DEFAULT_LOCK_TIMEOUT_S,
    in_write_transaction,
    write_transaction,
)


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """What a build did: full, incremental or nothing; rows per mart (an incremental
    build's without the views over several marts: `models.count_mart_rows`); wall time."""

    mode: str  # "full", "incremental" or "up to date"
    reason: str
    models: tuple[str, ...]
    mart_rows: Mapping[str, int]
    seconds: float
    evicted: int = 0  # samples of compacted days moved from the warehouse file to the lake
    kept: tuple[str, ...] = ()  # per closed month the build computed differently: one line
    expired: tuple[str, ...] = ()  # what retention deleted: one line each

    def __str__(self) -> str:
        moved = f"; {self.evicted:,} samples of compacted days moved to the lake" * bool(
            self.evicted
        )
        lines = [f"{self.mode} build ({self.reason}): {self.seconds:.1f} s{moved}; marts:"]
        width = max((len(name) for name in self.mart_rows), default=0)
        lines += [f"  {name:<{width}}  {rows:>12,} rows" for name, rows in self.mart_rows.items()]
        return "\n".join([*lines, *self.kept, *self.expired])


def build_models(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    full: bool = False,
    sql_dir: Path = SQL_DIR,
    fan_out: FanOut | None = None,
) -> BuildResult:
    """Update the marts on `con`: incrementally when the last build allows, else in full
    (the per-series models on the workers of `fan_out` when given: `fanout.py`)."""
    started = time.perf_counter()
    models = discover_models(sql_dir)
    order = build_order(models)
    prepare(con, config, sql_dir=sql_dir)
    ensure_state_tables(con)
    ensure_kept_tables(con)
    if not samples_view_is_current(con):
        # A warehouse of an older release: its samples_stored has just gained the newer
        # columns (`ensure_raw_tables`); the `samples` view the models read lists them too.
        refresh_samples_view(con, config)
        apply_table_docs(con, "samples", sql_dir)
    sql_files = [path for path in sql_dir.rglob("*") if path.suffix in (".sql", ".toml")]
    digest = fingerprint(con, model_variables(config), sql_files)
    state = read_state(con)
    top = samples_load_top(con)
    dated_since = None if state is None else dated_references_since(con)
    reopened = reopened_since(con)  # a month reopened: recomputed from its first day on
    refs_since = min((day for day in (dated_since, reopened) if day is not None), default=None)
    if full:
        mode, reason = "full", "asked for"
    elif state is None:
        mode, reason = "full", "first build"
    elif state.fingerprint != digest:
        mode, reason = (
            "full",
            "the SQL, the configuration or the reference data (users, hosts, prices) changed",
        )
    elif top == state.samples_load_id and not allocations_changed(con) and refs_since is None:
        mode, reason = "up to date", "no new samples or allocations"
    else:
        outcome = build_incrementally(
            con,
            config,
            models,
            order,
            after=state.samples_load_id,
            top=top,
            refs_since=refs_since,
        )
        if isinstance(outcome, str):
            mode, reason = "full", outcome
        else:
            mode = "incremental"
            reason = (
                f"{outcome.new_samples:,} new samples; {outcome.series:,} GPUs from their "
                f"first new sample or changed allocation on, {outcome.days} local days "
                "recomputed"
            )
            if dated_since is not None:
                reason += f"; dated users/hosts/prices rows changed from {dated_since} on"
            if reopened is not None:
                reason += f"; reopened days from {reopened} on"
    if mode == "full":
        forget_ids(con)
        _free_marts(con, models, order)
        lake = refresh_samples_view(con, config)  # the lake's files by their paths as of now
        build_all_models(con, models, order, sql_dir, fan_out=fan_out, lake=lake)
        record_full_build(con, top=top, digest=digest)
    kept = restore_kept(con, models, full=mode == "full") if mode != "up to date" else []
    if mode != "up to date":  # a failure is raised before anything is published
        check_marts(con, sql_dir, incremental=mode == "incremental")
    # Every row of samples_stored is in the marts now: compacted host-days may leave it.
    evicted = evict_built_days(con, config)
    expired = expire_samples(con, config)
    if evicted or expired.samples:
        apply_table_docs(con, "samples", sql_dir)  # a view made afresh has no comments
    return BuildResult(
        mode=mode,
        reason=reason,
        models=tuple(order),
        # an incremental build's leave out the views over several marts (job_efficiency)
        mart_rows=count_mart_rows(con, models, order, views=mode != "incremental"),
        seconds=time.perf_counter() - started,
        evicted=evicted,
        kept=tuple(kept),
        expired=(str(expired),) if expired.samples or expired.files else (),
    )


def _free_marts(
    con: duckdb.DuckDBPyConnection, models: Mapping[str, Model], order: list[str]
) -> None:
    """Before a full build: drop the marts it replaces and checkpoint, so that the new ones
    take the old ones' blocks instead of growing the file by the size of the marts."""
    for name in order:
        model = models[name]
        if model.layer == "marts" and model.materialized in PERSISTENT:
            con.execute(
                f"drop {'view' if model.materialized == 'view' else 'table'} if exists {name}"
            )
    con.execute("checkpoint")


def build(
    config: Config,
    *,
    full: bool = False,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    fan_out: FanOut | None = None,
) -> BuildResult:
    """Build the models on a private copy of the warehouse and publish it (no Prefect).

    Inside a caller's `write_transaction` the build joins it: the caller publishes, then
    runs `after_publish` (as `cycle.ingest_then_build` does)."""
    joined = in_write_transaction(config)
    # A full build replaces every mart: the other slot's stale marts need no catching up.
    with write_transaction(config, lock_timeout_s=lock_timeout_s, rebuild=full) as con:
        result = build_models(con, config, full=full, fan_out=fan_out)
    if joined:
        return result
    # Once published: the raw files of expired days, and weekly reports past reports_weeks.
    return replace(result, expired=result.expired + after_publish(config))
