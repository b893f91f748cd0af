"""A tiny hand-made warehouse with the marts of docs/reference.md#tables, for the report's tests.

The numbers are chosen so that every headline figure can be computed by hand:

week 2026-W46 (Mon 2026-11-09 .. Sun 2026-11-15, UTC), previous week 2026-W45.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import logging
import random
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import polars as pl
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope, Session

from gpufleet.config import Config, load_config
from tests.ports import free_port

WEEK = "2026-W46"
PREVIOUS_WEEK = "2026-W45"
MONDAY = dt.date(2026, 11, 9)
EVIL_TEAM = "<script>alert(1)</script>"
EVIL_USER = "</script><b>bob</b>"
EVIL_HOST = "node-<1>"

# Expected headline figures of WEEK (hand-computed from the rows below).
GPU_HOURS = 574.0
IDLE_GPU_HOURS = 134.0
WASTE_GPU_HOURS = 60.0
WASTE_USD = 1190.0
ENERGY_KWH = 215.0
MEAN_UTIL_PCT = 45.0  # (80% x 56 h + 10% x 56 h) / 112 h with a utilization
GPUS_SEEN = 4
COVERAGE_PCT = 100 * (4 * 168 - 12) / (4 * 168)
THERMAL_EVENTS = 4
THROTTLED_MINUTES = (600 + 300 + 120 + 60) / 60
PREVIOUS_WASTE_USD = 1060.0
PREVIOUS_GPU_HOURS = 360.0
IDLE_CAPACITY_GPU_HOURS = 24.0  # the (unallocated) row: GPUs no team held
IDLE_CAPACITY_USD = 60.0  # its 24 GPU-hours at $2.50

UTC = dt.UTC


def _ts(day: dt.date, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour, minute), tzinfo=UTC)


MART_DDL = """
create table team_daily (
    day date, team varchar, gpu_hours double, busy_gpu_hours double, avg_util_pct double,
    idle_gpu_hours double, waste_gpu_hours double, waste_usd double, energy_kwh double,
    gpus bigint, measured_gpu_hours double
);
create table team_weekly (
    iso_week varchar, week_start date, team varchar, gpu_hours double, busy_gpu_hours double,
    avg_util_pct double, idle_gpu_hours double, waste_gpu_hours double, waste_usd double,
    energy_kwh double, gpus bigint, cost_usd double
);
create table idle_episodes (
    gpu_uuid varchar, host varchar, gpu_index usmallint, gpu_name varchar, team varchar,
    "user" varchar, job_id varchar, attributed_by varchar, start_ts timestamptz,
    end_ts timestamptz, idle_seconds double, samples bigint, is_waste boolean,
    held_memory boolean, waste_usd double
);
create table thermal_events (
    gpu_uuid varchar, host varchar, gpu_index usmallint, team varchar, start_ts timestamptz,
    end_ts timestamptz, duration_s double, samples bigint, max_temp_gpu_c smallint,
    min_sm_clock_mhz integer, reasons_mask ubigint, is_hw boolean
);
create table gpu_daily (
    day date, gpu_uuid varchar, host varchar, gpu_name varchar, hours_observed double,
    avg_util_pct double, idle_hours double, thermal_seconds double, energy_kwh double
);
create table host_daily (
    day date, host varchar, gpus bigint, samples bigint, hours_observed double,
    first_ts timestamptz, last_ts timestamptz
);
create table gpu_hourly (
    day date, hour bigint, gpu_uuid varchar, team varchar, host varchar, samples bigint,
    observed_s double, utilization_s double, busy_s double, thermal_s double
);
create table quarantined_files (path varchar, reason varchar, quarantined_at timestamptz);
"""

H100 = "NVIDIA H100 80GB HBM3"


def _team_weekly() -> list[tuple[object, ...]]:
    w46, w45, w44 = MONDAY, MONDAY - dt.timedelta(weeks=1), MONDAY - dt.timedelta(weeks=2)
    return [
        # iso_week, week_start, team, gpu_h, busy_h, util%, idle_h, waste_h, waste$, kWh, gpus,
        # cost$ (the GPU-hours at $2.50)
        (WEEK, w46, EVIL_TEAM, 100.0, 20.0, 20.0, 60.0, 50.0, 1150.0, 30.0, 2, 250.0),
        (WEEK, w46, "vision", 300.0, 240.0, 80.0, 20.0, 10.0, 40.0, 120.0, 4, 750.0),
        (WEEK, w46, "nlp", 150.0, 90.0, 60.0, 30.0, 0.0, 0.0, 60.0, 2, 375.0),
        (WEEK, w46, "(unallocated)", 24.0, 0.0, 0.0, 24.0, 0.0, 0.0, 5.0, 1, 60.0),
        (PREVIOUS_WEEK, w45, EVIL_TEAM, 80.0, 16.0, 20.0, 40.0, 30.0, 1000.0, 25.0, 2, 200.0),
        (PREVIOUS_WEEK, w45, "vision", 280.0, 210.0, 75.0, 30.0, 15.0, 60.0, 110.0, 4, 700.0),
        ("2026-W44", w44, "vision", 250.0, 200.0, 80.0, 20.0, 8.0, 30.0, 100.0, 4, 625.0),
    ]


def _gpu_hourly() -> list[tuple[object, ...]]:
    """The samples (one per hour) as gpu_hourly rows (hours in UTC, the fixture's zone), each
    with the throttled seconds of the thermal events that ended in its hour."""
    throttled: dict[tuple[object, dt.datetime], float] = {}
    for gpu, _, _, _, _, end, duration, *_ in _thermal():
        assert isinstance(end, dt.datetime) and isinstance(duration, float)
        hour = end.replace(minute=0)
        throttled[(gpu, hour)] = throttled.get((gpu, hour), 0.0) + duration
    rows: list[tuple[object, ...]] = []
    for gpu, ts, host, _, _, interval, util, team, *_, day, _ in _samples():
        assert isinstance(ts, dt.datetime) and isinstance(interval, float)
        measured = interval if util is not None else 0.0
        busy = float(util) / 100 * interval if isinstance(util, float) else 0.0
        thermal = throttled.get((gpu, ts.replace(minute=0)), 0.0)
        rows.append((day, ts.hour, gpu, team, host, 1, interval, measured, busy, thermal))
    return rows


def _team_daily() -> list[tuple[object, ...]]:
    """The samples summed per day and team (the measures the report reads)."""
    sums: dict[tuple[object, object], list[float]] = {}
    for day, _, _, team, _, _, observed, measured, busy, _ in _gpu_hourly():
        total = sums.setdefault((day, team), [0.0, 0.0, 0.0])
        total[0] += observed / 3600
        total[1] += busy / 3600
        total[2] += measured / 3600
    return [
        (day, team, hours, busy, 100 * busy / measured if measured else None, 0.0, 0.0, 0.0,
         0.0, 1, measured)
        for (day, team), (hours, busy, measured) in sums.items()
    ]  # fmt: skip


def _samples() -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for offset in range(7):
        day = MONDAY + dt.timedelta(days=offset)
        for hour in range(9, 17):
            ts = _ts(day, hour)
            rows.append(
                ("gpu-v1", ts, "node-a", 0, H100, 3600.0, 80.0, "vision", "alice", "42",
                 "allocation", False, 2.5e6, day, WEEK)
            )  # fmt: skip
            rows.append(
                ("gpu-x1", ts, EVIL_HOST, 3, H100, 3600.0, 10.0, EVIL_TEAM, EVIL_USER, "j1",
                 "process", False, 1.0e6, day, WEEK)
            )  # fmt: skip
        rows.append(
            ("gpu-n1", _ts(day, 12), "node-b", 1, H100, 3600.0, None, "nlp", None, None,
             "host", None, None, day, WEEK)
        )  # fmt: skip
    # gpu-v2 reports once, without a utilization, in the hour it throttles
    thu = MONDAY + dt.timedelta(days=3)
    rows.append(
        ("gpu-v2", _ts(thu, 16), "node-a", 1, H100, 3600.0, None, "vision", None, None,
         "host", None, None, thu, WEEK)
    )  # fmt: skip
    last_week = MONDAY - dt.timedelta(days=3)
    rows.append(
        ("gpu-v1", _ts(last_week, 10), "node-a", 0, H100, 3600.0, 50.0, "vision", "alice",
         "41", "allocation", False, 2.0e6, last_week, PREVIOUS_WEEK)
    )  # fmt: skip
    return rows


def _episodes() -> list[tuple[object, ...]]:
    tue, wed = MONDAY + dt.timedelta(days=1), MONDAY + dt.timedelta(days=2)
    return [
        # the most expensive: 10 h on the evil team's GPU
        ("gpu-x1", EVIL_HOST, 3, H100, EVIL_TEAM, EVIL_USER, "j1", "process",
         _ts(tue, 10), _ts(tue, 20), 36000.0, 3600, True, True, 1150.0),
        ("gpu-v1", "node-a", 0, H100, "vision", "alice", "42", "allocation",
         _ts(wed, 0), _ts(wed, 8), 28800.0, 2880, True, False, 40.0),
        # not waste: never listed
        ("gpu-v1", "node-a", 0, H100, "vision", "alice", "42", "allocation",
         _ts(wed, 9), _ts(wed, 9, 20), 1200.0, 120, False, False, 0.0),
        # last week: not listed
        ("gpu-v1", "node-a", 0, H100, "vision", "carol", "40", "allocation",
         _ts(MONDAY - dt.timedelta(days=2), 0), _ts(MONDAY - dt.timedelta(days=2), 9),
         32400.0, 3240, True, False, 45.0),
    ]  # fmt: skip


def _thermal() -> list[tuple[object, ...]]:
    thu = MONDAY + dt.timedelta(days=3)
    return [
        ("gpu-v1", "node-a", 0, "vision", _ts(thu, 14), _ts(thu, 14, 10), 600.0, 60, 91, 1200,
         0x40, True),
        ("gpu-v1", "node-a", 0, "vision", _ts(thu, 15), _ts(thu, 15, 5), 300.0, 30, 88, 1400,
         0x20, False),
        ("gpu-v2", "node-a", 1, "vision", _ts(thu, 16), _ts(thu, 16, 2), 120.0, 12, 86, 1500,
         0x20, False),
        ("gpu-x1", EVIL_HOST, 3, EVIL_TEAM, _ts(MONDAY, 8, 59), _ts(MONDAY, 9), 60.0, 6, 84,
         1600, 0x20, False),
        # previous week
        ("gpu-v1", "node-a", 0, "vision", _ts(MONDAY - dt.timedelta(days=1), 3),
         _ts(MONDAY - dt.timedelta(days=1), 4), 3600.0, 360, 95, 1000, 0x60, True),
    ]  # fmt: skip


def _gpu_daily() -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for offset in range(7):
        day = MONDAY + dt.timedelta(days=offset)
        for gpu, host in (("gpu-v1", "node-a"), ("gpu-v2", "node-a"), ("gpu-n1", "node-b"),
                          ("gpu-x1", EVIL_HOST)):  # fmt: skip
            hours = 12.0 if (gpu == "gpu-n1" and offset == 6) else 24.0
            rows.append((day, gpu, host, H100, hours, 50.0, 2.0, 0.0, 10.0))
    for offset in range(7):
        day = MONDAY - dt.timedelta(days=7 - offset)
        for gpu in ("gpu-v1", "gpu-v2", "gpu-x1"):
            rows.append((day, gpu, "node-a", H100, 24.0, 50.0, 2.0, 0.0, 10.0))
    return rows


def _host_daily() -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for offset in range(7):
        day = MONDAY + dt.timedelta(days=offset)
        # node-a misses 1.5 hours of both GPUs on Wednesday: a gap
        hours = 45.0 if offset == 2 else 48.0
        rows.append((day, "node-a", 2, 17280, hours, _ts(day, 0, 0), _ts(day, 23, 59)))
        rows.append((day, EVIL_HOST, 1, 8640, 24.0, _ts(day, 0, 0), _ts(day, 23, 59)))
        if offset < 6:  # node-b goes silent on Sunday
            rows.append((day, "node-b", 1, 8640, 24.0, _ts(day, 0, 0), _ts(day, 23, 59)))
    for offset in range(7):  # the week before, in full (compared with WEEK)
        day = MONDAY - dt.timedelta(days=7 - offset)
        rows.append((day, "node-a", 2, 17280, 48.0, _ts(day, 0, 0), _ts(day, 23, 59)))
    return rows


_WAREHOUSES: dict[bool, Path] = {}  # with_rows -> the file written once this session


def make_warehouse(data_dir: Path, *, with_rows: bool = True) -> Path:
    """Write `<data_dir>/warehouse.duckdb` with the mart tables (and rows unless told not):
    a copy of the file written the first time (inserting the rows takes seconds)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "warehouse.duckdb"
    if path.exists():
        raise FileExistsError(path)
    written = _WAREHOUSES.get(with_rows)
    if written is None:
        folder = Path(tempfile.mkdtemp(prefix="gpufleet-test-warehouse-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        written = _WAREHOUSES[with_rows] = _write_warehouse(folder, with_rows=with_rows)
    shutil.copyfile(written, path)
    return path


def _write_warehouse(data_dir: Path, *, with_rows: bool) -> Path:
    path = data_dir / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    try:
        con.execute(MART_DDL)
        if with_rows:
            inserts: dict[str, list[tuple[object, ...]]] = {
                "team_weekly": _team_weekly(),
                "gpu_hourly": _gpu_hourly(),
                "idle_episodes": _episodes(),
                "thermal_events": _thermal(),
                "gpu_daily": _gpu_daily(),
                "host_daily": _host_daily(),
                "quarantined_files": [
                    (
                        "raw/samples/date=2026-11-10/host=node-b/broken.parquet",
                        "not a Parquet file",
                        _ts(MONDAY + dt.timedelta(days=1), 6),
                    ),
                ],
                "team_daily": _team_daily(),
            }
            for table, rows in inserts.items():
                marks = ", ".join("?" for _ in rows[0])
                con.executemany(f"insert into {table} values ({marks})", rows)
            add_run_pieces(con)
    finally:
        con.close()
    return path


def add_run_pieces(con: duckdb.DuckDBPyConnection) -> None:
    """idle_episodes' ids, and run_pieces as a build keys them: the episode id is the hash
    of the GPU and its run's first sample time; each fixture episode is one piece on its
    first day (none of them crosses midnight)."""
    con.execute("alter table idle_episodes add column if not exists episode_id bigint")
    con.execute("update idle_episodes set episode_id = (hash(gpu_uuid, start_ts) >> 1)::bigint")
    con.execute(
        """
        create or replace table run_pieces as
        select
            gpu_uuid, start_ts as idle_run_start_ts, start_ts::date as day, idle_seconds as seconds
        from idle_episodes
        """
    )


def write_config(data_dir: Path, extra: str = "") -> Path:
    """A gpufleet.toml in the data directory (UTC), with `extra` TOML appended."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "gpufleet.toml"
    path.write_text(
        f'timezone = "UTC"\ndata_dir = "{data_dir}"\n{extra}',
        encoding="utf-8",
    )
    return path


def fixture_config(data_dir: Path, extra: str = "") -> tuple[Config, Path]:
    """The hand-made warehouse in `data_dir` and its configuration (and config file)."""
    make_warehouse(data_dir)
    path = write_config(data_dir, extra)
    return load_config(config_path=path), path


# --- a real SMTP server on loopback ----------------------------------------------------------


@dataclass
class Inbox:
    """An aiosmtpd handler that keeps what arrived."""

    envelopes: list[Envelope] = field(default_factory=list)
    tls: list[bool] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        self.tls.append(session.ssl is not None)
        return "250 Message accepted for delivery"

    def message(self, index: int = -1) -> EmailMessage:
        raw = self.envelopes[index].original_content or b""
        parsed = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(parsed, EmailMessage)
        return parsed


REFUSAL_REPLY = "550 5.1.1 no such mailbox"


@dataclass
class RefusingInbox(Inbox):
    """Refuses the `refused` addresses at RCPT TO (550) and accepts the others; `tried` is
    every address a client gave at RCPT TO, in order."""

    refused: frozenset[str] = frozenset()
    tried: list[str] = field(default_factory=list)

    async def handle_RCPT(
        self, server: Any, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        self.tried.append(address)
        if address in self.refused:
            return REFUSAL_REPLY
        envelope.rcpt_tos.append(address)
        return "250 OK"


InboxT = TypeVar("InboxT", bound=Inbox)


@contextlib.contextmanager
def smtp_inbox(
    handler: InboxT | None = None, **controller_options: Any
) -> Iterator[tuple[InboxT, int]]:
    """An aiosmtpd server on 127.0.0.1 and a free port, with its inbox (`handler`, or a
    plain `Inbox`).

    aiosmtpd's own logging (logger `mail.log`) is kept out of the root logger's handlers,
    which Prefect may have bound to a stream that an earlier test captured and closed.
    """
    server_log = logging.getLogger("mail.log")
    propagate, server_log.propagate = server_log.propagate, False
    inbox, port = handler if handler is not None else Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port, **controller_options)
    controller.start()
    try:
        yield inbox, port  # type: ignore[misc]
    finally:
        controller.stop()
        server_log.propagate = propagate


# --- a warehouse the size of the demo's -------------------------------------------------------

DEMO_TEAMS = ("research", "speech", "nlp", "vision", "platform", "(unallocated)", "(unmapped)")


def make_demo_sized_warehouse(data_dir: Path) -> Path:
    """The marts of a week of a fleet the size of `gpufleet demo`'s (128 GPUs on 16 hosts of
    8, seven teams, a hot rack of four hosts throttling in most hours, 15 waste jobs, four
    weeks of trend), with noisy figures as real ones are (seeded: the same every run), for
    the size of what the report writes."""
    rng = random.Random(47)
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "warehouse.duckdb"
    hosts = [f"gpu-r{rack:02d}n{n:02d}" for rack in range(1, 5) for n in range(1, 5)]
    gpus = [(f"GPU-{h}-{i}", h, i) for h in hosts for i in range(8)]
    team_of = {uuid: DEMO_TEAMS[k % 6] for k, (uuid, _, _) in enumerate(gpus)}
    hourly, thermal, host_days, gpu_days = [], [], [], []
    for offset in range(7):
        day = MONDAY + dt.timedelta(days=offset)
        for uuid, host, _ in gpus:
            for hour in range(24):
                util = rng.uniform(0, 100)
                hot = host.startswith("gpu-r02") and rng.random() < 0.7
                hourly.append((day, hour, uuid, team_of[uuid], host, 120, 3600.0, 3600.0,
                               util * 36, 600.0 * hot))  # fmt: skip
                if hot:
                    start = _ts(day, hour, rng.randrange(50))
                    end = start + dt.timedelta(minutes=10)
                    temp, is_hw = rng.randrange(85, 95), rng.random() < 0.2
                    thermal.append((uuid, host, int(uuid[-1]), team_of[uuid], start, end,
                                    600.0, 20, temp, 900, 0x40, is_hw))  # fmt: skip
            gpu_days.append((day, uuid, host, H100, 24.0, 50.0, 6.0, 0.0, 10.0))
        for host in hosts:
            host_days.append((day, host, 8, 23040, 192.0, _ts(day, 0), _ts(day, 23, 59)))
    weekly = [
        (week, MONDAY - dt.timedelta(weeks=back), team, 3000.0 + rng.uniform(0, 500),
         1500.0, 50.0, 1000.0, 800.0, rng.uniform(500, 2500), 1000.0, 20, 7500.0)
        for back, week in enumerate((WEEK, PREVIOUS_WEEK, "2026-W44", "2026-W43"))
        for team in DEMO_TEAMS
    ]  # fmt: skip
    episodes = [
        (uuid, host, index, H100, team_of[uuid], f"user{k}", f"48{k:05d}", "process",
         _ts(MONDAY + dt.timedelta(days=k % 7), 1), _ts(MONDAY + dt.timedelta(days=k % 7), 9),
         28800.0, 960, True, False, 20.0 + k)
        for k, (uuid, host, index) in enumerate(gpus[:40])
    ]  # fmt: skip
    con = duckdb.connect(str(path))
    try:
        con.execute(MART_DDL)
        for table, rows in (
            ("team_weekly", weekly),
            ("gpu_hourly", hourly),
            ("idle_episodes", episodes),
            ("thermal_events", thermal),
            ("gpu_daily", gpu_days),
            ("host_daily", host_days),
        ):
            # through Arrow: executemany would take a minute for these rows
            names = [column[0] for column in con.execute(f"from {table} limit 0").description]
            con.register("new_rows", pl.DataFrame(rows, schema=names, orient="row"))
            con.execute(f"insert into {table} select * from new_rows")
            con.unregister("new_rows")
        con.execute(
            """
            insert into team_daily
            select day, team, sum(observed_s) / 3600, sum(busy_s) / 3600,
                100 * sum(busy_s) / sum(utilization_s), 0, 0, 0, 0, count(distinct gpu_uuid),
                sum(utilization_s) / 3600
            from gpu_hourly group by day, team
            """
        )
        add_run_pieces(con)
    finally:
        con.close()
    return path
