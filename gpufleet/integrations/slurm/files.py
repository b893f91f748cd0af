"""The importer's files: allocation rows and job records by cluster and day, and the
watermark.

Rows go to `raw/allocations/slurm-<cluster>-<YYYY-MM-DD>.csv`, the UTC day of the job's
start, in the format ingest reads, each with the job's Slurm cluster (`cluster`: the row
covers that site's host of the name). A job's rows are keyed by (job id, start): importing a
job again adds nothing, and a job seen running, then ended, has its open rows closed in the
file that holds them (the day of its start). Each started GPU job also has one record in
`raw/jobs/slurm-<cluster>-<YYYY-MM-DD>.csv` (same key, same day rule), whether or not
squeue saw its GPUs; a later import updates its state and end. A record carries the
job's own number too (`job_id_raw`): an array task's `123_4` is job 130 to its processes
and to jobstats' gpustat files. A file is rewritten whole
under a temporary `.` name, flushed and renamed, and only when its content changes, so that
a reader sees the old file or the new one, never a part.

The watermark, the end of the last window asked of sacct, is kept in
`<data_dir>/imports/slurm.json`, beside the other importers' records: it says where the
next run starts, not what the files hold (they are their own record), so losing it costs
one larger query, never a duplicate row.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from gpufleet.errors import GpufleetError
from gpufleet.integrations.files import write_text_atomically

RECORD_FILE = "slurm.json"


class AllocationRow(NamedTuple):
    job_id: str
    user: str | None
    team: str | None  # None: ingest looks the user up in users.csv
    host: str
    gpu_index: int
    start_ts: dt.datetime
    end_ts: dt.datetime | None  # None: still running
    cluster: str | None = None  # the job's Slurm cluster: its row covers that site's host


class JobUpdate(NamedTuple):
    """What one run knows of one started job: its key, its end, and the GPUs squeue gave
    (empty when squeue did not see it run)."""

    job_id: str
    start_ts: dt.datetime
    end_ts: dt.datetime | None
    rows: tuple[AllocationRow, ...]
    cluster: str | None = None  # the job's Slurm cluster, written into its rows


class JobRecord(NamedTuple):
    """One started GPU job, as `raw/jobs/*.csv` holds it."""

    job_id: str
    job_id_raw: str | None  # sacct's job number (SlurmJob.job_id_raw); None: not known
    cluster: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str
    team: str | None  # None: team_from = "user" (ingest maps the user)
    gpus: int
    hosts: tuple[str, ...]  # its nodes, as the collectors name them
    start_ts: dt.datetime
    end_ts: dt.datetime | None  # None: still running
    # The import's clock when it last saw the job running (or first saw it ended): a running
    # job's allocation counts up to it where no sample says more. None: not written.
    seen_ts: dt.datetime | None = None


# The files' headers: the records' fields, in order (`_render` writes them so).
COLUMNS: tuple[str, ...] = AllocationRow._fields
JOB_COLUMNS: tuple[str, ...] = JobRecord._fields
# The header of the allocation files of a release before `cluster`: read, and written anew.
_COLUMNS_BEFORE_CLUSTER = tuple(name for name in COLUMNS if name != "cluster")
# The headers of the job files of the releases before `seen_ts` and before `job_id_raw`:
# read, and written anew.
_JOB_COLUMNS_BEFORE_SEEN = tuple(name for name in JOB_COLUMNS if name != "seen_ts")
_JOB_COLUMNS_BEFORE_RAW = tuple(name for name in _JOB_COLUMNS_BEFORE_SEEN if name != "job_id_raw")


def day_file(folder: Path, cluster: str | None, start_ts: dt.datetime) -> Path:
    """The file of a job's rows or record in `folder`: its cluster and start's UTC day."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", cluster or "slurm")
    day = start_ts.astimezone(dt.UTC).date().isoformat()
    return folder / f"slurm-{name}-{day}.csv"


def _time(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"no UTC offset in {text!r}")
    return value.astimezone(dt.UTC)


def read_rows(path: Path) -> list[AllocationRow]:
    """The rows of a file this importer wrote ([] when there is none)."""
    if not path.is_file():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            if tuple(reader.fieldnames or ()) not in (COLUMNS, _COLUMNS_BEFORE_CLUSTER):
                raise ValueError(f"header {reader.fieldnames} is not {','.join(COLUMNS)}")
            return [
                AllocationRow(
                    row["job_id"],
                    row["user"] or None,
                    row["team"] or None,
                    row["host"],
                    int(row["gpu_index"]),
                    _time(row["start_ts"]),
                    _time(row["end_ts"]) if row["end_ts"] else None,
                    row.get("cluster") or None,
                )
                for row in reader
            ]
    except (OSError, KeyError, TypeError, ValueError, csv.Error) as exc:
        raise GpufleetError(
            f"{path}: not an allocation file as 'gpufleet import slurm' writes it ({exc}); "
            "move it away to import again"
        ) from exc


def merge(existing: list[AllocationRow], updates: Iterable[JobUpdate]) -> list[AllocationRow]:
    """`existing` with each job's news: its rows closed when it ended, the GPUs not yet
    listed added, and the open rows of an earlier start of the same job id (a requeued
    job) closed where the new start begins. Every row of the job takes its cluster (a row
    of a file written before `cluster` gains it)."""
    rows = list(existing)
    for update in updates:
        held = set()
        for position, row in enumerate(rows):
            if row.job_id != update.job_id:
                continue
            if row.cluster is None and update.cluster is not None:
                rows[position] = row = row._replace(cluster=update.cluster)
            if row.start_ts == update.start_ts:
                held.add((row.host, row.gpu_index))
                if update.end_ts is not None and row.end_ts != update.end_ts:
                    rows[position] = row._replace(end_ts=update.end_ts)
            elif row.end_ts is None and row.start_ts < update.start_ts:
                rows[position] = row._replace(end_ts=update.start_ts)
        rows.extend(
            row._replace(end_ts=update.end_ts, cluster=update.cluster)
            for row in update.rows
            if (row.host, row.gpu_index) not in held
        )
    return sorted(rows, key=lambda r: (r.start_ts, _job_order(r.job_id), r.host, r.gpu_index))


def _job_order(job_id: str) -> tuple[int, ...]:
    """123 < 123_2 < 123_10 < 124: the numbers of a job id, in order."""
    return tuple(int(number) for number in re.findall(r"\d+", job_id))


def _iso(value: dt.datetime | None) -> str:
    return value.astimezone(dt.UTC).isoformat() if value is not None else ""


def _cell(value: object) -> object:
    """A value as its CSV cell: None empty, a time in ISO-8601 UTC, a host list spaced."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return _iso(value)
    if isinstance(value, tuple):
        return " ".join(value)
    return value


def _render(columns: tuple[str, ...], rows: Iterable[tuple[object, ...]]) -> str:
    """The file's text: the header, then each row's fields in `columns`' order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([_cell(value) for value in row] for row in rows)
    return out.getvalue()


def render(rows: list[AllocationRow]) -> str:
    return _render(COLUMNS, rows)


def read_jobs(path: Path) -> list[JobRecord]:
    """The records of a job file this importer wrote ([] when there is none)."""
    if not path.is_file():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = tuple(reader.fieldnames or ())
            if header not in (JOB_COLUMNS, _JOB_COLUMNS_BEFORE_SEEN, _JOB_COLUMNS_BEFORE_RAW):
                raise ValueError(f"header {reader.fieldnames} is not {','.join(JOB_COLUMNS)}")
            return [
                JobRecord(
                    row["job_id"],
                    row.get("job_id_raw") or None,
                    row["cluster"] or None,
                    row["user"] or None,
                    row["account"] or None,
                    row["partition"] or None,
                    row["state"],
                    row["team"] or None,
                    int(row["gpus"]),
                    tuple(row["hosts"].split()),
                    _time(row["start_ts"]),
                    _time(row["end_ts"]) if row["end_ts"] else None,
                    _time(row["seen_ts"]) if row.get("seen_ts") else None,
                )
                for row in reader
            ]
    except (OSError, KeyError, TypeError, ValueError, AttributeError, csv.Error) as exc:
        raise GpufleetError(
            f"{path}: not a job file as 'gpufleet import slurm' writes it ({exc}); "
            "move it away to import again"
        ) from exc


def merge_jobs(existing: list[JobRecord], seen: Iterable[JobRecord]) -> list[JobRecord]:
    """`existing` with the jobs `seen` now: a new (job id, start) is added, a known one
    takes the state and end seen (the rest stays as first written, as the allocation
    rows' team does), unless it has ended and is seen running (older news); its `seen_ts`
    moves on while it runs (an ended job's stays, so that its file is not rewritten). A
    record of a release that did not write `job_id_raw` takes the one seen."""
    records = {(record.job_id, record.start_ts): record for record in existing}
    for record in seen:
        key = (record.job_id, record.start_ts)
        known = records.get(key)
        if known is None:
            records[key] = record
            continue
        if known.job_id_raw is None:
            known = records[key] = known._replace(job_id_raw=record.job_id_raw)
        if record.end_ts is not None or known.end_ts is None:
            running = record.end_ts is None or known.end_ts is None or known.seen_ts is None
            records[key] = known._replace(
                state=record.state,
                end_ts=record.end_ts,
                seen_ts=record.seen_ts if running else known.seen_ts,
            )
    return sorted(records.values(), key=lambda r: (r.start_ts, _job_order(r.job_id), r.job_id))


def render_jobs(records: list[JobRecord]) -> str:
    return _render(JOB_COLUMNS, records)


def read_watermark(path: Path) -> dt.datetime | None:
    """The end of the last window imported (None before the first run)."""
    if not path.is_file():
        return None
    try:
        return _time(json.loads(path.read_text(encoding="utf-8"))["watermark"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GpufleetError(
            f"{path}: not the record 'gpufleet import slurm' writes ({exc}); remove it and "
            "give --since"
        ) from exc


def write_watermark(path: Path, watermark: dt.datetime) -> None:
    write_text_atomically(path, json.dumps({"watermark": _iso(watermark)}, indent=1) + "\n")
