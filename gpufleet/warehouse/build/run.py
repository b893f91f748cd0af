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

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.catalog import relation_kinds
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
from gpufleet.warehouse.build.steps import Step, StepClock, record_steps, step_lines
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
    build's without the views over several marts: `models.count_mart_rows`); wall time, and
    each step's (`steps.py`; `gpufleet build --verbose` prints them)."""

    mode: str  # "full", "incremental" or "up to date"
    reason: str
    models: tuple[str, ...]
    mart_rows: Mapping[str, int]
    seconds: float
    evicted: int = 0  # samples of compacted days moved from the warehouse file to the lake
    kept: tuple[str, ...] = ()  # per closed month the build computed differently: one line
    expired: tuple[str, ...] = ()  # what retention deleted: one line each
    steps: tuple[Step, ...] = ()  # in the order they ran; a standalone build's publish last

    def __str__(self) -> str:
        moved = f"; {self.evicted:,} samples of compacted days moved to the lake" * bool(
            self.evicted
        )
        lines = [f"{self.mode} build ({self.reason}): {self.seconds:.1f} s{moved}; marts:"]
        width = max((len(name) for name in self.mart_rows), default=0)
        lines += [f"  {name:<{width}}  {rows:>12,} rows" for name, rows in self.mart_rows.items()]
        return "\n".join([*lines, *self.kept, *self.expired])

    def step_lines(self) -> list[str]:
        """Each step's wall time, share, CPU time and rows, in the order they ran."""
        return [f"steps ({len(self.steps)}):", *step_lines(self.steps)]


def build_models(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    *,
    full: bool = False,
    sql_dir: Path = SQL_DIR,
    fan_out: FanOut | None = None,
    clock: StepClock | None = None,
) -> BuildResult:
    """Update the marts on `con`: incrementally when the last build allows, else in full
    (the per-series models on the workers of `fan_out` when given: `fanout.py`). Each step's
    time is kept in `build_state.build_steps` (`steps.py`); `clock`: one started earlier."""
    clock = clock or StepClock.start()
    with clock.step("prepare"):
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
    with clock.step("decide"):  # full, incremental or up to date
        sql_files = [path for path in sql_dir.rglob("*") if path.suffix in (".sql", ".toml")]
        digest = fingerprint(con, model_variables(config), sql_files)
        state = read_state(con)
        top = samples_load_top(con)
        dated_since = None if state is None else dated_references_since(con)
        reopened = reopened_since(con)  # a month reopened: recomputed from its first day on
        refs_since = min((day for day in (dated_since, reopened) if day is not None), default=None)
        changed = (
            state is not None
            and state.fingerprint == digest
            and (top != state.samples_load_id or allocations_changed(con) or refs_since is not None)
        )
    if full:
        mode, reason = "full", "asked for"
    elif state is None:
        mode, reason = "full", "first build"
    elif state.fingerprint != digest:
        mode, reason = (
            "full",
            "the SQL, the configuration or the reference data (users, hosts, prices) changed",
        )
    elif not changed:
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
            clock=clock,
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
        with clock.step("free_marts"):
            forget_ids(con)
            _free_marts(con, models, order)
        with clock.step("list_lake_files"):
            lake = refresh_samples_view(con, config)  # the lake's files by their paths as of now
        build_all_models(con, models, order, sql_dir, fan_out=fan_out, lake=lake, clock=clock)
        with clock.step("record_state"):
            record_full_build(con, top=top, digest=digest)
    kept: list[str] = []
    if mode != "up to date":
        with clock.step("kept_rows"):
            kept = restore_kept(con, models, full=mode == "full")
        with clock.step("data_tests"):  # a failure is raised before anything is published
            check_marts(con, sql_dir, incremental=mode == "incremental")
    # Every row of samples_stored is in the marts now: compacted host-days may leave it.
    with clock.step("evict_to_lake") as step:
        evicted = step.rows = evict_built_days(con, config)
    with clock.step("expire_samples") as step:
        expired = expire_samples(con, config)
        step.rows = expired.samples
        if evicted or expired.samples:
            apply_table_docs(con, "samples", sql_dir)  # a view made afresh has no comments
    with clock.step("count_marts"):
        # an incremental build's leave out the views over several marts (job_efficiency)
        mart_rows = count_mart_rows(con, models, order, views=mode != "incremental")
    with clock.step("checkpoint"):  # the build's changes written to the file
        con.execute("checkpoint")
    record_steps(con, clock, mode=mode, reason=reason)
    seconds, _ = clock.elapsed()
    return BuildResult(
        mode=mode,
        reason=reason,
        models=tuple(order),
        mart_rows=mart_rows,
        seconds=seconds,
        evicted=evicted,
        kept=tuple(kept),
        expired=(str(expired),) if expired.samples or expired.files else (),
        steps=tuple(clock.steps),
    )


def _free_marts(
    con: duckdb.DuckDBPyConnection, models: Mapping[str, Model], order: list[str]
) -> None:
    """Before a full build: drop the marts it replaces and checkpoint, so that the new ones
    take the old ones' blocks instead of growing the file by the size of the marts. Each is
    dropped as what the warehouse holds (a mart that was a table may be a view now); their
    kinds are one catalog query, and a new warehouse's drop nothing."""
    marts = [name for name in order if models[name].layer == "marts"]
    held = relation_kinds(con, [name for name in marts if models[name].materialized in PERSISTENT])
    for name in marts:
        if name in held:
            con.execute(f"drop {held[name]} {name}")
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
    clock = StepClock.start()
    # A full build replaces every mart: the other slot's stale marts need no catching up.
    with write_transaction(config, lock_timeout_s=lock_timeout_s, rebuild=full) as con:
        if not joined:  # waiting for the lock, then catching the slot up or copying the file
            seconds, cpu_s = clock.elapsed()
            clock.add(Step(name="open_warehouse", is_model=False, seconds=seconds, cpu_s=cpu_s))
        result = build_models(con, config, full=full, fan_out=fan_out, clock=clock)
        built = clock.elapsed()
    if joined:
        return result
    # Published (checkpointed, synced, renamed) after its steps were recorded in it: the
    # result has this step, build_state.build_steps not.
    seconds, cpu_s = clock.elapsed()
    publish = Step(
        name="publish", is_model=False, seconds=seconds - built[0], cpu_s=cpu_s - built[1]
    )
    # Once published: the raw files of expired days, and weekly reports past reports_weeks.
    return replace(
        result,
        expired=result.expired + after_publish(config),
        steps=(*result.steps, publish),
        seconds=seconds,
    )
