"""Where a build's time goes: each step's wall time, CPU time and rows, kept in `build_state`.

Every build (full, incremental or up to date) times its steps with a `StepClock`: each model
it runs, and its own steps besides (the data tests, the kept rows, eviction, expiry, the
checkpoint...). `record_steps` writes them into `build_state.build_steps`, with the build's
own row in `build_state.builds`, in the build's transaction: published with it. The
newest BUILDS_KEPT builds of each mode are kept. `gpufleet build --verbose` prints them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import duckdb

from gpufleet.warehouse.publish.log import current_generation

# The newest builds of each mode (full, incremental, up to date) whose steps are kept.
BUILDS_KEPT = 20

STEPS_DDL = """
create schema if not exists build_state;
create table if not exists build_state.builds (
    build_id bigint not null,        -- the publish the build went into (build_state.generation)
    built_at timestamptz not null,
    mode varchar not null,           -- full, incremental or up to date
    reason varchar not null,
    seconds double not null,         -- wall time, from its start to its last step
    cpu_s double not null            -- the process's CPU time in it, DuckDB's threads included
);
create table if not exists build_state.build_steps (
    build_id bigint not null,
    step_no integer not null,        -- the order the steps ran in, from 1
    step varchar not null,           -- a model's name, or one of the build's own steps
    is_model boolean not null,
    seconds double not null,
    cpu_s double not null,
    "rows" bigint                    -- see Step.rows
);
"""


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a build and what it took."""

    name: str  # a model's name, or one of the build's own steps ("data_tests", ...)
    is_model: bool
    seconds: float  # wall time
    cpu_s: float  # this process's CPU time (every thread: DuckDB's included)
    # A model's: the rows its table holds after the step (None for a view); an eviction's or
    # expiry's: the samples it moved or deleted; otherwise None.
    rows: int | None = None


@dataclass
class Running:
    """What a step's code may tell its clock before it ends."""

    rows: int | None = None


@dataclass
class StepClock:
    """The steps of one build, timed as they run."""

    steps: list[Step]
    started: float  # time.perf_counter() at the build's start
    started_cpu: float  # time.process_time() then

    @classmethod
    def start(cls) -> StepClock:
        return cls(steps=[], started=time.perf_counter(), started_cpu=time.process_time())

    @contextlib.contextmanager
    def step(self, name: str, *, is_model: bool = False) -> Iterator[Running]:
        """Time the block as the step `name`; the block may set the yielded `.rows`. A step
        that raises is not recorded (nor is the build: nothing is published)."""
        running = Running()
        wall, cpu = time.perf_counter(), time.process_time()
        yield running
        self.steps.append(
            Step(
                name=name,
                is_model=is_model,
                seconds=time.perf_counter() - wall,
                cpu_s=time.process_time() - cpu,
                rows=running.rows,
            )
        )

    def add(self, step: Step) -> None:
        """A step timed elsewhere (opening the warehouse, before the build's clock started)."""
        self.steps.append(step)

    @contextlib.contextmanager
    def model(
        self, con: duckdb.DuckDBPyConnection, name: str, *, is_table: bool
    ) -> Iterator[Running]:
        """Time a model's step; its rows are its table's after it (`is_table`), else None.
        The block may set the yielded `.rows` (a table it created: `create_model`'s count),
        which saves counting them again."""
        with self.step(name, is_model=True) as running:
            yield running
            if is_table and running.rows is None:
                row = con.execute(f"select count(*) from {name}").fetchone()
                running.rows = int(row[0]) if row else 0

    def elapsed(self) -> tuple[float, float]:
        """Wall and CPU seconds since the build started."""
        return time.perf_counter() - self.started, time.process_time() - self.started_cpu


def record_steps(
    con: duckdb.DuckDBPyConnection,
    clock: StepClock,
    *,
    mode: str,
    reason: str,
) -> None:
    """The build's steps and its own row into `build_state`, in the build's transaction;
    the steps of builds past the newest BUILDS_KEPT of their mode are deleted."""
    con.execute(STEPS_DDL)
    build_id = current_generation(con)
    seconds, cpu_s = clock.elapsed()
    con.execute("delete from build_state.build_steps where build_id = ?", [build_id])
    con.execute("delete from build_state.builds where build_id = ?", [build_id])
    con.execute(
        "insert into build_state.builds values (?, now(), ?, ?, ?, ?)",
        [build_id, mode, reason, seconds, cpu_s],
    )
    # one statement for every step (a statement a step costs about 0.5 ms each)
    steps = clock.steps
    con.execute(
        """
        insert into build_state.build_steps
        select $build_id, unnest($numbers), unnest($names), unnest($is_model),
            unnest($seconds), unnest($cpu_s), unnest($rows)
        """,
        {
            "build_id": build_id,
            "numbers": list(range(1, len(steps) + 1)),
            "names": [step.name for step in steps],
            "is_model": [step.is_model for step in steps],
            "seconds": [step.seconds for step in steps],
            "cpu_s": [step.cpu_s for step in steps],
            "rows": [step.rows for step in steps],
        },
    )
    con.execute(
        """
        delete from build_state.builds where build_id in (
            select build_id from (
                select build_id,
                    row_number() over (partition by mode order by build_id desc) as newest,
                from build_state.builds
            )
            where newest > $kept
        )
        """,
        {"kept": BUILDS_KEPT},
    )
    con.execute(
        "delete from build_state.build_steps"
        " where build_id not in (select build_id from build_state.builds)"
    )


def step_lines(steps: Sequence[Step], *, top: int | None = None) -> list[str]:
    """The steps as aligned lines, in the order they ran (with `top`: the slowest `top`)."""
    shown = sorted(steps, key=lambda step: -step.seconds)[:top] if top else list(steps)
    width = max((len(step.name) for step in shown), default=0)
    total = sum(step.seconds for step in steps) or 1.0
    return [
        f"  {step.name:<{width}}  {step.seconds:>8.2f} s  {100 * step.seconds / total:>3.0f} %"
        f"  CPU {step.cpu_s:>8.2f} s" + ("" if step.rows is None else f"  {step.rows:>13,} rows")
        for step in shown
    ]
