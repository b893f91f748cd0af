"""Reading and validating the Slurm job records (raw/jobs/*.csv, written by `gpufleet import
slurm` or a site's own export): each (job_id, start_ts) once, with the cells the importer
writes; only `job_id` and `start_ts` are required. A bad line is set aside, as an
allocation file's (`csv_rows.py`)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from gpufleet.warehouse.refs.csv_rows import (
    _read_lines,
    _RefError,
    _required,
    _Row,
    _timestamp,
)
from gpufleet.warehouse.refs.records import (
    JOBS_COLUMNS,
    JOBS_OPTIONAL,
    SetAside,
    SlurmJobRecord,
)


def _hosts(row: _Row, name: str) -> tuple[str, ...] | None:
    text = row.cells[name]
    if text is None:
        return None
    hosts = tuple(text.split())
    for host in hosts:
        if "," in host or "[" in host:
            raise _RefError(
                row.line,
                f"'{name}' must be host names separated by spaces, got {text!r} "
                "(a Slurm host list such as node[01-02] is not expanded)",
            )
    return tuple(dict.fromkeys(hosts))


def _count(row: _Row, name: str) -> int | None:
    text = row.cells[name]
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise _RefError(row.line, f"'{name}' is not a whole number: {text!r}") from None
    if not 0 <= value <= 2**31 - 1:
        raise _RefError(row.line, f"'{name}' must be a number >= 0, got {text!r}")
    return value


def read_jobs(
    path: Path,
    source_file: str,
    display: str | None = None,
    *,
    set_aside: list[SetAside] | None = None,
) -> tuple[SlurmJobRecord, ...]:
    """One raw/jobs/*.csv file: each (job_id, start_ts) at most once (a later line that
    repeats one is bad). Its bad lines go to `set_aside` (None: the first fails the read)."""
    seen: dict[tuple[str, dt.datetime], int] = {}

    def parse(row: _Row) -> SlurmJobRecord:
        job_id = _required(row, "job_id")
        start = _timestamp(row, "start_ts", required=True)
        end = _timestamp(row, "end_ts", required=False)
        last_seen = _timestamp(row, "seen_ts", required=False)
        assert start is not None
        if end is not None and end < start:
            raise _RefError(row.line, "'end_ts' is before 'start_ts'")
        first = seen.setdefault((job_id, start), row.line)
        if first != row.line:
            raise _RefError(
                row.line,
                f"job '{job_id}' starting at {start.isoformat()} is listed twice "
                f"(first on line {first})",
            )
        return SlurmJobRecord(
            job_id=job_id,
            job_id_raw=row.cells["job_id_raw"],
            cluster=row.cells["cluster"],
            user=row.cells["user"],
            account=row.cells["account"],
            partition=row.cells["partition"],
            state=row.cells["state"],
            team=row.cells["team"],
            gpus=_count(row, "gpus"),
            hosts=_hosts(row, "hosts"),
            start_ts=start,
            end_ts=end,
            seen_ts=last_seen,
            source_file=source_file,
        )

    return tuple(
        _read_lines(
            path, JOBS_COLUMNS, parse, source_file, display or str(path), JOBS_OPTIONAL, set_aside
        )
    )
