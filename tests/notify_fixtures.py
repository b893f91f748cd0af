"""A tiny fleet with hand-computed idle episodes around one day, for the notices' tests.

Every GPU samples once a minute (interval 60 s). Day D is 2026-11-16, in UTC. The idle
utilization is 1 %, the busy 90 %; an idle episode is waste from 30 minutes on (the
default), and a user is mailed from 2 GPU-hours of waste a day (the default).

| GPU | host, index | user (team) | idle on D | expected |
|---|---|---|---|---|
| GPU-a0 | node-a 0, H100 | alice (vision) | 09:00-13:00, 4 h | alice's notice |
| GPU-a1 | node-a 1, H100 | alice (vision) | 10:00-11:30, 1.5 h | alice's notice |
| GPU-b0 | node-b 0, A100 | bob (nlp) | 12:00-12:40, 40 min | under the threshold |
| GPU-b1 | node-b 1, A100 | EVIL (nlp), no address | 14:00-17:00, 3 h | the nlp lead's notice |
| GPU-c0 | node-c 0, H100 | carol (vision), opted out | 08:00-13:00, 5 h | nobody |
| GPU-a2 | node-a 2, H100 | dave (vision) | 22:00 D - 02:00 D+1, still open | dave's notice |
| GPU-a3 | node-a 3, H100 | erin (vision) | 20:00 D - 01:00 D+1, then busy | D+1's, not D's |
| GPU-d0 | node-d 0, H100 | frank (cv), no address, cv has no lead | 09:00-12:00 | nobody, said so |
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.config import Config, load_config
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from tests.templates import made_once

DAY = dt.date(2026, 11, 16)
NEXT_DAY = dt.date(2026, 11, 17)
EVIL = "<script>alert(1)</script>"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
IDLE, BUSY = 1.0, 90.0

USERS_CSV = (
    "user,team,email\n"
    "alice,vision,alice@example.org\n"
    "bob,nlp,bob@example.org\n"
    f'"{EVIL}",nlp,\n'
    "carol,vision,carol@example.org\n"
    "dave,vision,dave@example.org\n"
    "erin,vision,erin@example.org\n"
    "frank,cv,\n"
)
TEAMS_CSV = 'team,lead_email,cc\nnlp,nlp-lead@example.org,"ops@example.org; fin@example.org"\n'
PRICES_CSV = "gpu_glob,usd_per_gpu_hour\n*H100*,2.5\n*A100*,1.25\n"


def at(day: dt.date, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour, minute), tzinfo=dt.UTC)


def samples(
    gpu: str,
    host: str,
    index: int,
    name: str,
    user: str,
    job: str,
    phases: list[tuple[dt.datetime, dt.datetime, float]],
) -> list[dict[str, Any]]:
    """One sample a minute for each (start, end, utilization): ts in (start, end]."""
    rows = []
    for start, end, util in phases:
        ts = start + dt.timedelta(minutes=1)
        while ts <= end:
            rows.append(
                {
                    "ts": ts,
                    "interval_s": 60.0,
                    "host": host,
                    "gpu_index": index,
                    "gpu_uuid": gpu,
                    "gpu_name": name,
                    "status": "ok",
                    "gpu_util_pct": util,
                    "power_w": 100.0 if util == IDLE else 500.0,
                    "mem_used_bytes": 1 << 30,
                    "mem_total_bytes": 80 << 30,
                    "processes": [
                        {"pid": 42, "user": user, "used_mem_bytes": 1 << 30, "job_id": job}
                    ],
                }
            )
            ts += dt.timedelta(minutes=1)
    return rows


def day_one_fleet() -> list[dict[str, Any]]:
    """The samples of D (and the first hours of D+1), as the table above."""
    d, n = DAY, NEXT_DAY
    return [
        *samples("GPU-a0", "node-a", 0, H100, "alice", "101",
                 [(at(d, 8), at(d, 9), BUSY), (at(d, 9), at(d, 13), IDLE),
                  (at(d, 13), at(d, 14), BUSY)]),
        *samples("GPU-a1", "node-a", 1, H100, "alice", "102",
                 [(at(d, 9), at(d, 10), BUSY), (at(d, 10), at(d, 11, 30), IDLE),
                  (at(d, 11, 30), at(d, 12), BUSY)]),
        *samples("GPU-b0", "node-b", 0, A100, "bob", "201",
                 [(at(d, 11), at(d, 12), BUSY), (at(d, 12), at(d, 12, 40), IDLE),
                  (at(d, 12, 40), at(d, 13), BUSY)]),
        *samples("GPU-b1", "node-b", 1, A100, EVIL, "202",
                 [(at(d, 13), at(d, 14), BUSY), (at(d, 14), at(d, 17), IDLE),
                  (at(d, 17), at(d, 18), BUSY)]),
        *samples("GPU-c0", "node-c", 0, H100, "carol", "301",
                 [(at(d, 8), at(d, 13), IDLE), (at(d, 13), at(d, 14), BUSY)]),
        *samples("GPU-a2", "node-a", 2, H100, "dave", "401",
                 [(at(d, 21), at(d, 22), BUSY), (at(d, 22), at(n, 2), IDLE)]),
        *samples("GPU-a3", "node-a", 3, H100, "erin", "501",
                 [(at(d, 19), at(d, 20), BUSY), (at(d, 20), at(n, 1), IDLE),
                  (at(n, 1), at(n, 3), BUSY)]),
        *samples("GPU-d0", "node-d", 0, H100, "frank", "601",
                 [(at(d, 9), at(d, 12), IDLE), (at(d, 12), at(d, 13), BUSY)]),
    ]  # fmt: skip


def write_samples(data_dir: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """The rows as collector files, one per UTC date and host."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["ts"].date().isoformat(), row["host"]), []).append(row)
    for (date, host), group in groups.items():
        path = data_dir / f"raw/samples/date={date}/host={host}/{name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        schema = SAMPLE_SCHEMA.with_metadata(file_metadata())
        pq.write_table(pa.Table.from_pylist(group, schema=schema), path)


# carol opts out by her address, in another case
OPT_OUT_CAROL = 'opt_out = ["Carol@Example.org"]\n'


def write_config(
    data_dir: Path, *, notify: str = OPT_OUT_CAROL, extra: str = "", timezone: str = "UTC"
) -> Config:
    """gpufleet.toml: the `notify` lines in [notify], and the `extra` sections after it."""
    path = data_dir / "gpufleet.toml"
    path.write_text(
        f'timezone = "{timezone}"\ndata_dir = "{data_dir}"\n[notify]\n{notify}{extra}',
        encoding="utf-8",
    )
    return load_config(config_path=path, data_dir=data_dir)


def smtp_section(port: int) -> str:
    """[report] sender and [smtp] of an SMTP server on loopback."""
    return f'[report]\nsender = "gpufleet@example.org"\n[smtp]\nhost = "127.0.0.1"\nport = {port}\n'


def write_refs(data_dir: Path) -> None:
    ref = data_dir / "ref"
    ref.mkdir(parents=True, exist_ok=True)
    (ref / "users.csv").write_text(USERS_CSV, encoding="utf-8")
    (ref / "teams.csv").write_text(TEAMS_CSV, encoding="utf-8")
    (ref / "prices.csv").write_text(PRICES_CSV, encoding="utf-8")


def make_fleet(
    data_dir: Path, *, notify: str = OPT_OUT_CAROL, extra: str = "", timezone: str = "UTC"
) -> Config:
    """The fleet of D, ingested and built, and its configuration. Ingest and build read
    neither [notify] nor the [report] and [smtp] sections `extra` may hold, so the fleet is
    built once per test process and timezone (tests/templates.py) and copied to
    `data_dir`, with its own configuration file."""
    assert not re.search(r"^\[(?!report\]|smtp\])", extra, re.MULTILINE), extra

    def fill(folder: Path) -> None:
        config = write_config(folder, notify="", timezone=timezone)
        write_refs(folder)
        write_samples(folder, "day-one", day_one_fleet())
        ingest(config, compact=False)
        build(config)

    made_once(f"notify_fixtures.make_fleet({timezone})", fill, data_dir)
    return write_config(data_dir, notify=notify, extra=extra, timezone=timezone)
