"""The fleet-scale benchmark: the whole pipeline at 1,000 GPUs (issue: fleet-scale performance).

Each step runs in a fresh child process (`python -m bench.step ...`) so that its wall time
and peak RSS are its own, the way a scheduled deployment runs it, but without the Prefect
server start-up that a served deployment does not pay either.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from bench.floor import duckdb_floor_seconds, floor_columns, polars_floor_seconds
from gpufleet.weeks import last_complete_week, previous_week, week_monday

if TYPE_CHECKING:
    from gpufleet.warehouse.base import SampleFile

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str
    target: str
    values: tuple[float, ...]
    unit: str
    passed: bool | None

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def row(self) -> str:
        low, high = min(self.values), max(self.values)
        verdict = {True: "met", False: "**missed**", None: ""}[self.passed]
        spread = f"{low:,.2f} / {high:,.2f}" if len(self.values) > 1 else ""
        return (
            f"| {self.name} | {self.median:,.2f} {self.unit} | {spread} | "
            f"{len(self.values)} | {self.target} | {verdict} |"
        )


@dataclasses.dataclass(frozen=True)
class StepResult:
    wall_s: float
    max_rss_mb: float
    output: dict[str, Any]


# The steps a user runs as a command, timed from the start of their process to its end
# (Python's start and the imports included, which the command's user waits for too); the
# others in-process, as a deployment's long-running process runs a cycle.
WHOLE_PROCESS_STEPS = frozenset({"ingest", "build"})


def run_step(args: Sequence[str], *, log: Callable[[str], None]) -> StepResult:
    """Run `python -m bench.step ARGS` in a child process; its wall time and peak RSS."""
    command = [sys.executable, "-m", "bench.step", *args]
    log("  $ " + " ".join(command[2:]))
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(
            f"bench step {' '.join(args)} failed ({completed.returncode}):\n"
            f"{completed.stderr[-4000:]}"
        )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    output = json.loads(lines[-1]) if lines else {}
    return StepResult(
        wall_s=wall if args[0] in WHOLE_PROCESS_STEPS else float(output.get("seconds", wall)),
        max_rss_mb=float(output.get("max_rss_mb", 0.0)),
        output=output,
    )


def _planned_batches(data_dir: Path, max_files: int | None = None) -> list[list[SampleFile]]:
    """The raw files as ingest's batches read them (`plan_batches`: one day, at most
    `MAX_FILES_PER_BATCH` files each, or `max_files`)."""
    from gpufleet.config import Config
    from gpufleet.warehouse.ingest import find_sample_files, plan_batches
    from gpufleet.warehouse.ingest.cut import MAX_FILES_PER_BATCH

    files = find_sample_files(Config(data_dir=data_dir))
    return plan_batches(files, max_files or MAX_FILES_PER_BATCH)


def _batches(data_dir: Path, max_files: int | None = None) -> list[list[str]]:
    """Ingest's batches (`_planned_batches`) as DuckDB path literals."""
    from gpufleet.warehouse.base import literal_path

    return [
        [literal_path(str(data_dir / file.path)) for file in batch]
        for batch in _planned_batches(data_dir, max_files)
    ]


def floor_readers(data_dir: Path) -> dict[str, Callable[[], float]]:
    """Each way to read the floor's columns of `data_dir`'s raw files (bench/floor.py), by
    name: the seconds one run takes. Over 126,000 files DuckDB keeps about 160 KB per file
    until one query over all of them ends (21 GB uncapped), so those are capped at 4 GB."""
    files_glob = str(data_dir / "raw" / "samples" / "**" / "*.parquet")
    # The files listed and batched once, not on every run.
    plain = [[str(data_dir / f.path) for f in batch] for batch in _planned_batches(data_dir)]
    literal = _batches(data_dir)
    per_day = _batches(data_dir, 2000)
    every_file = [path for batch in literal for path in batch]
    return {
        "DuckDB, one glob": lambda: duckdb_floor_seconds(files_glob, memory_limit="4GB"),
        "DuckDB, ingest's batches": lambda: duckdb_floor_seconds(files_glob, literal),
        "DuckDB, per-day batches of 2,000 files": lambda: duckdb_floor_seconds(files_glob, per_day),
        "DuckDB, file list": lambda: duckdb_floor_seconds(
            files_glob, [every_file], memory_limit="4GB"
        ),
        "polars, ingest's batches": lambda: polars_floor_seconds(files_glob, plain),
    }


def compact_work_seconds(data_dir: Path, scratch: Path) -> float:
    """What a compacting backfill cannot avoid, with ingest's own reader and writer and no
    warehouse: each of ingest's batches read as ingest reads it (`read_and_check`: every
    file's footer, every column read by polars, cast, checked, sorted), `READ_AHEAD` batches
    at a time in as many threads, and each host-day written as a compacted file (the same
    writer) by `WRITER_THREADS` threads, while the next batches are read."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.compute as pc

    from gpufleet.config import Config
    from gpufleet.warehouse.ingest import find_sample_files
    from gpufleet.warehouse.ingest.check import Checked, read_and_check
    from gpufleet.warehouse.ingest.pipeline import READ_AHEAD
    from gpufleet.warehouse.ingest.read import Oversized
    from gpufleet.warehouse.ingest.values import time_limits
    from gpufleet.warehouse.lake import CompactAhead
    from gpufleet.warehouse.lake.compact_ahead import WRITER_THREADS
    from gpufleet.warehouse.lake.compacted_file import write_compacted

    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    config = Config(data_dir=data_dir)
    batches = _planned_batches(data_dir)
    ahead = CompactAhead.plan(config, find_sample_files(config), dt.date.max)
    limits = time_limits(config.ingest, dt.datetime.now(dt.UTC))

    def write(number: int, rows: pa.Table, first: int) -> None:
        """Write every WRITER_THREADS-th host-day of a batch, from the `first`."""
        ends = pc.run_end_encode(rows.column("_part").combine_chunks()).run_ends.to_pylist()
        days = list(enumerate(zip([0, *ends[:-1]], ends, strict=True)))
        for part, (start, end) in days[first::WRITER_THREADS]:
            target = scratch / f"{number}-{part}.parquet"
            slice_ = rows.slice(start, end - start).drop_columns(["_file_index", "_part"])
            write_compacted(slice_, target, versions="", sources=0)

    started = time.perf_counter()
    with (
        ThreadPoolExecutor(WRITER_THREADS) as writer,
        ThreadPoolExecutor(READ_AHEAD) as reader,
    ):
        written: list[Future[None]] = []
        reads: deque[Future[Checked | Oversized]] = deque(
            reader.submit(read_and_check, config, batch, ahead, limits)
            for batch in batches[:READ_AHEAD]
        )
        for number in range(len(batches)):
            read = reads.popleft().result()
            if number + READ_AHEAD < len(batches):
                reads.append(
                    reader.submit(
                        read_and_check, config, batches[number + READ_AHEAD], ahead, limits
                    )
                )
            if not isinstance(read, Checked) or read.by_duckdb:
                raise RuntimeError(f"batch {number} is not read by polars alone: {read}")
            for future in written:
                future.result()
            written = [
                writer.submit(write, number, read.rows, first) for first in range(WRITER_THREADS)
            ]
            del read
        for future in written:
            future.result()
    seconds = time.perf_counter() - started
    shutil.rmtree(scratch, ignore_errors=True)
    return seconds


def linked_copy(source: Path, target: Path) -> None:
    """`target` as a copy of `source` made of hard links: compaction replaces files (it never
    writes into one), so each backfill can start from the same raw files in no time."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in ("raw", "ref"):
        shutil.copytree(source / name, target / name, copy_function=os.link)


def directory_bytes(path: Path, suffix: str = "") -> int:
    return sum(
        entry.stat().st_size
        for entry in path.rglob(f"*{suffix}")
        if entry.is_file() and not entry.name.startswith(".")
    )


def used_bytes(data_dir: Path) -> int:
    """Bytes in the blocks the warehouse uses (its file also holds freed ones)."""
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        row = con.execute("select block_size * used_blocks from pragma_database_size()").fetchone()
    return int(row[0]) if row else 0


def machine_description() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return (
        f"{os.cpu_count()} cores ({cpu}), {memory_gb:.0f} GB RAM, Python "
        f"{sys.version.split()[0]}, DuckDB {duckdb.__version__}"
    )


@dataclasses.dataclass
class PipelineBench:
    work: Path
    gpus: int = 1000
    days: int = 7
    repeat: int = 3
    heavy_repeat: int | None = None  # runs of the backfill and the full build (default: repeat)
    history_weeks: int = 4
    # or "churn": bench/churn_fleet.py's fleet, or "foreign": bench/foreign_fleet.py's, whose
    # files another program wrote (for these two, the backfill and the full builds only)
    fleet: str = "simulated"
    log: Callable[[str], None] = print
    figures: list[Figure] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    on_figure: Callable[[], None] = lambda: None  # called after each figure (partial results)
    # The backfill's warm floor (the fastest reader's best run, bench/floor.py), once
    # measured: each build is also given as a multiple of it, a figure that the machine's
    # speed (which changes within minutes on a shared one) moves less than seconds.
    scan_floor_s: float | None = None
    # The peer's database file, bytes a sample, once measured (bench/floor.py).
    peer_bytes_per_sample: float | None = None

    @property
    def label(self) -> str:
        return {
            "churn": "second fleet (churn_fleet.py): ",
            "foreign": "third fleet, files of other writers (foreign_fleet.py): ",
        }.get(self.fleet, "")

    def week(self) -> str:
        # The week before the last complete one, so that every day of it is completed.
        return previous_week(last_complete_week("UTC"))

    def data_dir(self, name: str) -> Path:
        return self.work / name

    def step(self, *args: str) -> StepResult:
        return run_step(list(args), log=self.log)

    def add(
        self, name: str, target: str, values: Sequence[float], unit: str, limit: float | None = None
    ) -> Figure:
        figure = Figure(
            f"{self.label}{name}",
            target,
            tuple(values),
            unit,
            None if limit is None else statistics.median(values) <= limit,
        )
        self.figures.append(figure)
        self.on_figure()
        self.log(f"  {name}: {figure.median:,.2f} {unit}")
        return figure

    def simulate(self, data_dir: Path, *, start: dt.date, days: int, flush_s: float) -> float:
        return self.step(
            "simulate",
            "--data-dir",
            str(data_dir),
            "--gpus",
            str(self.gpus),
            "--start",
            start.isoformat(),
            "--days",
            str(days),
            "--flush",
            f"{flush_s:g}",
        ).wall_s

    def run(self) -> None:
        week = self.week()
        monday = week_monday(week)
        raw_dir = self.data_dir("raw-week")
        self.log(f"pipeline bench: {self.gpus} GPUs x {self.days} days ({week}) in {self.work}")
        self.notes.append(
            "a steady cycle is what the 15-minute deployment runs: ingest, then an incremental "
            "build (each GPU from the local hour of its first new sample on; its GPU-days from "
            "their hours), in one warehouse transaction; its ingest takes the flush's "
            "(simulated) day for today, so it does not compact that day's files, as a live "
            "deployment would not until the day is over; the cycles are timed from 23:00 of a "
            "day whose earlier flushes were loaded first, when the day's rows are fullest"
        )
        self.notes.append(
            "ingest and build are timed from their process's start to its end (Python's start "
            "and the imports included, as for a user's `gpufleet ingest` or `gpufleet build`, "
            "which without a Prefect server call the same engine functions); the cycle and "
            "the report within their process"
        )

        if not (raw_dir / "raw" / "samples").is_dir():
            self.log("simulating the week as collectors write it (10-minute files)")
            seconds = self.simulate(raw_dir, start=monday, days=self.days, flush_s=600)
            self.notes.append(f"simulating the week took {seconds:,.0f} s")
        rows, raw_bytes = self.raw_week(raw_dir)
        self.backfill(raw_dir)

        # The warehouse that keeps every sample in its file (no compaction), for the full
        # build and the storage figures below.
        loaded = self.data_dir("loaded")
        shutil.rmtree(loaded, ignore_errors=True)
        loaded.mkdir(parents=True)
        os.symlink(raw_dir / "raw", loaded / "raw")
        os.symlink(raw_dir / "ref", loaded / "ref")
        self.step("ingest", "--data-dir", str(loaded), "--no-compact")

        # 2. Full build.
        self.log("2. full build")
        self.full_builds(loaded, "")

        # 4a. Storage without compaction: every sample stays in the warehouse file.
        self.add("raw collector files", "", [raw_bytes / rows], "bytes/sample")
        self.add(
            "warehouse that keeps every sample (ingest --no-compact)",
            "",
            [(loaded / "warehouse.duckdb").stat().st_size / rows],
            "bytes/sample",
        )

        # 5. Report.
        self.log("5. weekly report")
        reports = [
            self.step("report", "--data-dir", str(loaded), "--week", week)
            for _ in range(self.repeat)
        ]
        self.add("weekly report", "<= 10 s", [r.wall_s for r in reports], "s", limit=10)

        # 3. Steady state, on its own copy of the lake (compaction rewrites files).
        self.log("3. steady-state cycle (one flush from every host, ingest + build)")
        steady = self.data_dir("steady")
        shutil.rmtree(steady, ignore_errors=True)
        shutil.copytree(raw_dir / "raw", steady / "raw")
        shutil.copytree(raw_dir / "ref", steady / "ref")
        self.step("ingest", "--data-dir", str(steady))  # loads and compacts the week
        first = self.step("build", "--data-dir", str(steady), "--full")
        self.log(f"   first build after the ingest: {first.wall_s:.1f} s")

        # 2b and 4b. A full build reading the compacted days from the lake, and the storage
        # of a warehouse whose compacted days are in the lake (what `ingest` does by default).
        self.log("2b. full build, samples in the lake")
        lake_builds = self.full_builds(steady, ", samples in the lake")
        self.storage(steady, rows, len(lake_builds) + 1, warehouse_limit=8)
        week_end = dt.datetime.combine(
            monday + dt.timedelta(days=self.days), dt.time(), tzinfo=dt.UTC
        )
        one_week, next_start = self.cycles(steady, week_end)
        self.add("steady cycle, 1-week history", "", one_week, "s")

        earlier = monday - dt.timedelta(weeks=self.history_weeks - 1)
        self.log(f"   adding {self.history_weeks - 1} earlier weeks (daily files) for history")
        self.simulate(steady, start=earlier, days=7 * (self.history_weeks - 1), flush_s=86400)
        self.step("ingest", "--data-dir", str(steady))
        self.step("build", "--data-dir", str(steady), "--full")
        four_weeks, _ = self.cycles(steady, next_start)
        self.add(
            f"steady cycle, {self.history_weeks}-week history", "<= 10 s", four_weeks, "s", limit=10
        )
        ratio = statistics.median(four_weeks) / statistics.median(one_week)
        self.add(f"{self.history_weeks}-week / 1-week cycle", "<= 1.5x", [ratio], "x", limit=1.5)

    def run_churn(self) -> None:
        """The second or third fleet (`fleet`): its backfill, first build and full builds (no
        steady cycle: their generators write whole days, not the next flush)."""
        from bench import churn_fleet, foreign_fleet

        generate = foreign_fleet.generate if self.fleet == "foreign" else churn_fleet.generate
        monday = week_monday(self.week())
        raw_dir = self.data_dir(f"raw-week-{self.fleet}")
        self.log(
            f"pipeline bench, {self.label.split(' (')[0]}: {self.gpus} GPUs x {self.days} days"
        )
        if not (raw_dir / "raw" / "samples").is_dir():
            started = time.perf_counter()
            generate(raw_dir, gpus=self.gpus, start=monday, days=self.days)
            self.notes.append(
                f"{self.label}generating it took {time.perf_counter() - started:,.0f} s"
            )
        rows, raw_bytes = self.raw_week(raw_dir)
        self.add("raw files", "", [raw_bytes / rows], "bytes/sample")
        backfill = self.backfill(raw_dir)
        builds = self.full_builds(backfill, ", samples in the lake")
        self.storage(backfill, rows, len(builds) + 1)

    def storage(
        self, data_dir: Path, rows: int, full_builds: int, warehouse_limit: float | None = None
    ) -> None:
        """Bytes per sample of `data_dir`'s compacted lake and warehouse file, where ingest
        compacted the week and `full_builds` full builds ran since (noted)."""
        lake = directory_bytes(data_dir / "raw" / "samples", ".parquet")
        self.add("compacted lake", "", [lake / rows], "bytes/sample")
        warehouse = (data_dir / "warehouse.duckdb").stat().st_size
        self.add(
            "warehouse",
            "" if warehouse_limit is None else f"<= {warehouse_limit:g} bytes/sample",
            [warehouse / rows],
            "bytes/sample",
            limit=warehouse_limit,
        )
        self.add("warehouse, blocks in use", "", [used_bytes(data_dir) / rows], "bytes/sample")
        self.add("warehouse and lake", "", [(warehouse + lake) / rows], "bytes/sample")
        if self.peer_bytes_per_sample:
            self.add(
                "warehouse and lake / the peer's database file",
                "<= 1x",
                [(warehouse + lake) / rows / self.peer_bytes_per_sample],
                "x",
                limit=1.0,
            )
        self.notes.append(
            f"{self.label}storage is measured where ingest compacted the week (a backfill's "
            f"days go straight into the lake, the default), after {full_builds} full builds; "
            "full builds into one file leave freed blocks in it that later writes reuse "
            "('blocks in use' leaves them out), and a publish whose file is more free than "
            "used is written afresh"
        )

    def raw_week(self, raw_dir: Path) -> tuple[int, int]:
        """(samples, bytes) of the raw week's files, noted."""
        samples_glob = str(raw_dir / "raw" / "samples" / "**" / "*.parquet")
        files = sum(1 for _ in (raw_dir / "raw" / "samples").rglob("*.parquet"))
        counted = (
            duckdb.connect()
            .execute("select count(*) from read_parquet(?)", [samples_glob])
            .fetchone()
        )
        rows = int(counted[0]) if counted else 0
        self.notes.append(f"{self.label}{rows:,} samples in {files:,} raw files")
        return rows, directory_bytes(raw_dir / "raw" / "samples", ".parquet")

    def backfill(self, raw_dir: Path) -> Path:
        """Time the backfill and the first build after it against the floor and the peer
        (bench/floor.py), measured in the same run; the backfilled data directory."""
        # 1. Backfill (`gpufleet ingest` as users run it: it loads and compacts) against the
        # floor's readers, each run alternately with it, warm; then the first build after
        # it (full, and the one that moves the compacted days to the lake), as its own row.
        self.log("1. backfill ingest (default: loads and compacts) vs the floor and the peer")
        readers = floor_readers(raw_dir)
        columns = floor_columns(str(raw_dir / "raw" / "samples" / "**" / "*.parquet"))
        self.notes.append(
            f"{self.label}the floor reads {len(columns)} columns every raw file holds, each "
            "with the cheapest aggregate that decodes it (max, bool_or, a list's length): "
            + ", ".join(columns)
        )
        readers["DuckDB, ingest's batches"]()  # warm: one untimed read of every file first
        floors: dict[str, list[float]] = {name: [] for name in readers}
        compact_work: list[float] = []  # the work a compacting ingest cannot avoid
        ingests: list[StepResult] = []
        first_builds: list[StepResult] = []
        backfill = self.data_dir(
            "backfill" if self.fleet == "simulated" else f"backfill-{self.fleet}"
        )
        for attempt in range(self.heavy_repeat or self.repeat):
            for name, read in readers.items():
                floors[name].append(read())
            compact_work.append(compact_work_seconds(raw_dir, self.data_dir("compact-work")))
            linked_copy(raw_dir, backfill)
            ingests.append(self.step("ingest", "--data-dir", str(backfill)))
            first_builds.append(self.step("build", "--data-dir", str(backfill)))
            self.log(
                f"  run {attempt + 1}: floor "
                + ", ".join(f"{name} {values[-1]:.1f} s" for name, values in floors.items())
                + f"; ingest {ingests[-1].wall_s:.1f} s"
                + f"; first build {first_builds[-1].wall_s:.1f} s"
            )
        for name, values in floors.items():
            self.add(f"floor read of the raw week, {name}", "", values, "s")
        fastest = min(floors, key=lambda name: min(floors[name]))
        self.scan_floor_s = min(floors[fastest])
        self.add("warm floor (the fastest reader's best run)", "", [self.scan_floor_s], "s")
        self.notes.append(f"{self.label}the fastest reader of the floor: {fastest}")
        self.add(
            "ingest's reader and writer alone, overlapped as ingest runs them, no warehouse",
            "",
            compact_work,
            "s",
        )
        self.add("backfill `gpufleet ingest` of the week", "", [i.wall_s for i in ingests], "s")
        self.add(
            "backfill ingest / warm floor",
            "<= 1.5x",
            [i.wall_s / self.scan_floor_s for i in ingests],
            "x",
            limit=1.5,
        )
        self.add(
            "backfill ingest / its reader and writer alone",
            "",
            [i.wall_s / w for i, w in zip(ingests, compact_work, strict=True)],
            "x",
        )
        self.add(
            "backfill ingest peak RSS", "<= 2048 MB", [i.max_rss_mb for i in ingests], "MB", 2048
        )
        self.step_shares(f"{self.label}backfill ingest", ingests)
        self.add_builds(
            "first build after the backfill (full; a backfilled day is in the lake already)",
            "first build peak RSS",
            first_builds,
        )
        self.peer(raw_dir, ingests)
        return backfill

    def peer(self, raw_dir: Path, ingests: Sequence[StepResult]) -> None:
        """Time the peer once (bench/floor.py: the one-statement DuckDB load a user would run
        instead), its peak RSS and bytes a sample, and the backfill against it."""
        self.log("   the peer: one DuckDB statement loads the raw week")
        peer = self.step("peer", "--data-dir", str(raw_dir))
        rows = int(peer.output["rows"]) or 1
        self.peer_bytes_per_sample = int(peer.output["bytes"]) / rows
        self.notes.append(f"{self.label}the peer's statement: {peer.output['statement']}")
        self.add("peer: one-statement DuckDB load of the raw week", "", [peer.wall_s], "s")
        self.add("peer peak RSS", "", [peer.max_rss_mb], "MB")
        self.add("peer's database file", "", [self.peer_bytes_per_sample], "bytes/sample")
        self.add(
            "backfill ingest / the peer's time",
            "<= 1x",
            [i.wall_s / peer.wall_s for i in ingests],
            "x",
            limit=1.0,
        )
        self.add(
            "backfill ingest peak RSS / the peer's",
            "<= 1x",
            [i.max_rss_mb / peer.max_rss_mb for i in ingests],
            "x",
            limit=1.0,
        )

    def step_shares(self, what: str, results: Sequence[StepResult]) -> None:
        """Each step's median seconds and share of the total, from the steps' own timings
        (`IngestResult.step_seconds`), and the work of the threads alongside the batches
        (`alongside_seconds`), as notes: where the next regression is found."""
        by_step: dict[str, list[float]] = {}
        for result in results:
            for name, seconds in result.output.get("steps", []):
                by_step.setdefault(name, []).append(float(seconds))
        if not by_step:
            return
        medians = {name: statistics.median(values) for name, values in by_step.items()}
        total = sum(medians.values()) or 1.0
        self.notes.append(
            f"{what}, median seconds per step (share): "
            + ", ".join(
                f"{name} {seconds:,.1f} s ({100 * seconds / total:.0f}%)"
                for name, seconds in medians.items()
            )
        )
        batches_s = medians.get("batches", 0.0) + medians.get("waiting for reads", 0.0) or 1.0
        alongside: dict[str, list[float]] = {}
        for result in results:
            for name, seconds in result.output.get("alongside", []):
                alongside.setdefault(name, []).append(float(seconds))
        if alongside:
            self.notes.append(
                f"{what}, median seconds of the work in a thread alongside the batches (share "
                "of the batches' time, reads included, it kept a core busy): "
                + ", ".join(
                    f"{name} {statistics.median(values):,.1f} s "
                    f"({100 * statistics.median(values) / batches_s:.0f}%)"
                    for name, values in alongside.items()
                )
            )

    def full_builds(self, data_dir: Path, where: str) -> list[StepResult]:
        """Time `gpufleet build --full` (wall time and peak RSS) on `data_dir`."""
        builds = [
            self.step("build", "--data-dir", str(data_dir), "--full")
            for _ in range(self.heavy_repeat or self.repeat)
        ]
        self.add_builds(f"full build of the week{where}", f"full build peak RSS{where}", builds)
        return builds

    def add_builds(self, name: str, rss_name: str, builds: Sequence[StepResult]) -> None:
        """A row of the builds' wall time (<= 60 s) and one of their peak RSS (<= 2 GB)."""
        self.add(name, "<= 60 s", [b.wall_s for b in builds], "s", limit=60)
        if self.scan_floor_s:
            self.add(
                f"{name.split(' (')[0]} / warm floor",
                "<= 1.0x",
                [b.wall_s / self.scan_floor_s for b in builds],
                "x",
                limit=1.0,
            )
        self.add(rss_name, "<= 2048 MB", [b.max_rss_mb for b in builds], "MB", limit=2048)

    def cycles(
        self, data_dir: Path, start: dt.datetime, fleet_start: dt.date | None = None
    ) -> tuple[list[float], dt.datetime]:
        """Time `repeat` cycles, each one new 10-minute flush from every host, from 23:00 of
        the day `start` falls in (UTC, the bench's timezone), when the day's GPU-day rows
        (which a cycle adds up again from the day's hours) are fullest. The flushes from
        `start` to 23:00 are loaded first, untimed, and one more untimed cycle follows: the
        first write after a full build copies the warehouse file, the next catches the other
        slot up with that large load; every later one catches up in place. The flushes are
        of the fleet simulated from `fleet_start` for `days` (default: the bench's week).
        Returns the times and where the next flush starts."""
        late = start.replace(hour=23, minute=0, second=0, microsecond=0)
        if late <= start:
            late += dt.timedelta(days=1)
        seconds: list[float] = []
        for number in range(-2, self.repeat):
            if number == -2:  # the day's earlier flushes, all at once
                window = ("--at", start.isoformat(), "--until", late.isoformat())
            else:
                window = ("--at", (late + dt.timedelta(minutes=10 * (number + 1))).isoformat())
            self.step(
                "flush",
                "--data-dir",
                str(data_dir),
                "--gpus",
                str(self.gpus),
                "--start",
                (fleet_start or week_monday(self.week())).isoformat(),
                "--days",
                str(self.days),
                *window,
            )
            result = self.step("cycle", "--data-dir", str(data_dir))
            if number < 0:
                self.log(f"  untimed cycle: {result.wall_s:.2f} s {result.output}")
                continue
            seconds.append(result.wall_s)
            self.log(f"  cycle {number + 1}: {result.wall_s:.2f} s {result.output}")
        return seconds, late + dt.timedelta(minutes=10 * (self.repeat + 1))
