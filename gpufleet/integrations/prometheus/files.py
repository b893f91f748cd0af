"""Writing what a window imported: its rows cut per host and UTC date (a sample file
each), allocation files and the record of imported windows.

Allocation rows go to one CSV per source and UTC day, `raw/allocations/prometheus-<source>-
<YYYY-MM-DD>.csv`, in the format ingest reads, each with the site the import writes into
the samples (`cluster`, empty when none); a file with a pod on a MIG device has a column
more, `gpu_uuid`, the device's UUID. A run over UTC midnight is cut there, each day's
piece in its day's file, so a window only ever changes the files of its own days. A pod's
row that the previous window ended where this one starts is extended rather than repeated,
and a row already there is not added again, so importing a window twice changes nothing.
Every file is written under a temporary `.` name, flushed and renamed into place.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from gpufleet.errors import GpufleetError
from gpufleet.integrations.files import write_text_atomically
from gpufleet.integrations.prometheus.pods import PodAllocation

ALLOCATION_COLUMNS = (
    "job_id",
    "user",
    "team",
    "host",
    "gpu_index",
    "start_ts",
    "end_ts",
    "cluster",
)
MIG_COLUMN = "gpu_uuid"  # in the files with a row of a MIG device


def allocation_path(allocations_dir: Path, source: str, day: dt.date) -> Path:
    return allocations_dir / f"prometheus-{source}-{day.isoformat()}.csv"


def _read_rows(path: Path) -> list[PodAllocation]:
    """The rows of an allocation file this importer wrote."""
    if not path.is_file():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            return [
                PodAllocation(
                    row["job_id"],
                    row["user"] or None,
                    row["team"],
                    row["host"],
                    int(row["gpu_index"]),
                    dt.datetime.fromisoformat(row["start_ts"]),
                    dt.datetime.fromisoformat(row["end_ts"]),
                    row.get("cluster") or None,  # none in a file of an earlier release
                    row.get(MIG_COLUMN) or None,
                )
                for row in csv.DictReader(handle)
            ]
    except (OSError, KeyError, TypeError, ValueError, csv.Error) as exc:
        raise GpufleetError(
            f"{path}: not an allocation file as gpufleet writes it ({exc}); "
            "move it away to import again"
        ) from exc


def merged(existing: list[PodAllocation], new: Iterable[PodAllocation]) -> list[PodAllocation]:
    """`existing` with `new` added: a row continuing one that ends where it starts extends
    it; a row already covered adds nothing."""
    rows = list(existing)
    # Each pod-on-GPU's rows (their places in `rows`, in order): a day's file holds thousands
    # of rows, and a window adds a row per pod on a GPU.
    places: dict[tuple[object, ...], list[int]] = {}
    for i, row in enumerate(rows):
        places.setdefault(_pod_on_gpu(row), []).append(i)
    for row in new:
        same = places.setdefault(_pod_on_gpu(row), [])
        for i in same:
            old = rows[i]
            if old.start_ts <= row.start_ts and row.end_ts <= old.end_ts:
                break
            if old.end_ts == row.start_ts:
                rows[i] = old._replace(end_ts=row.end_ts)
                break
        else:
            same.append(len(rows))
            rows.append(row)
    return sorted(rows, key=lambda r: (r.start_ts, r.host, r.gpu_index, r.gpu_uuid or "", r.job_id))


def _pod_on_gpu(row: PodAllocation) -> tuple[object, ...]:
    return (row.job_id, row.host, row.gpu_index, row.cluster, row.gpu_uuid)


def by_utc_day(row: PodAllocation) -> Iterator[tuple[dt.date, PodAllocation]]:
    """`row` cut at each UTC midnight it spans, with the day of each piece."""
    start, end = row.start_ts.astimezone(dt.UTC), row.end_ts.astimezone(dt.UTC)
    while True:
        midnight = dt.datetime.combine(start.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
        if end <= midnight:
            yield start.date(), row._replace(start_ts=start, end_ts=end)
            return
        yield start.date(), row._replace(start_ts=start, end_ts=midnight)
        start = midnight


def allocation_files(
    allocations_dir: Path, source: str, rows: Iterable[PodAllocation]
) -> dict[Path, str]:
    """The new content of each day's allocation file that `rows` change."""
    by_day: dict[dt.date, list[PodAllocation]] = {}
    for row in rows:
        for day, piece in by_utc_day(row):
            by_day.setdefault(day, []).append(piece)
    contents: dict[Path, str] = {}
    for day, new in sorted(by_day.items()):
        path = allocation_path(allocations_dir, source, day)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        rows = merged(_read_rows(path), new)
        mig = any(r.gpu_uuid for r in rows)
        writer.writerow((*ALLOCATION_COLUMNS, MIG_COLUMN) if mig else ALLOCATION_COLUMNS)
        for r in rows:
            writer.writerow(
                [
                    r.job_id,
                    r.user or "",
                    r.team,
                    r.host,
                    r.gpu_index,
                    r.start_ts.astimezone(dt.UTC).isoformat(),
                    r.end_ts.astimezone(dt.UTC).isoformat(),
                    r.cluster or "",
                    *([r.gpu_uuid or ""] if mig else []),
                ]
            )
        contents[path] = out.getvalue()
    return contents


def rows_by_host(table: pa.Table) -> dict[str, pa.Table]:
    """The rows of each host in `table`, in their order: a stable sort by host, cut where
    the host changes (a filter per host read the whole table once per host)."""
    if not table.num_rows:
        return {}
    grouped = table.take(pc.sort_indices(table, [("host", "ascending")]))
    runs = pc.run_end_encode(grouped["host"].combine_chunks())
    ends = runs.run_ends.to_pylist()
    starts = [0, *ends[:-1]]
    return {
        host: grouped.slice(start, end - start)
        for host, start, end in zip(runs.values.to_pylist(), starts, ends, strict=True)
    }


def rows_by_date(table: pa.Table) -> Iterator[tuple[str, pa.Table]]:
    """The rows of each UTC date of `ts` in `table`, as the collector's writer splits its
    own files: the whole table when its rows are of one date (a window within a day)."""
    if not table.num_rows:
        return
    first, last = (value.as_py() for value in pc.min_max(table["ts"]).values())
    if first.date() == last.date():
        yield first.date().isoformat(), table
        return
    dates = pc.strftime(table["ts"], format="%Y-%m-%d")
    for date in pc.unique(dates).to_pylist():
        yield date, table.filter(pc.equal(dates, date))


class ImportedWindows:
    """Which spans of time were imported from which Prometheus: `<data_dir>/imports/
    prometheus.json`, {url: [[start_s, end_s], ...]}, merged spans, half-open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.spans: dict[str, list[tuple[int, int]]] = {}
        if path.is_file():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                self.spans = {
                    str(url): [(int(a), int(b)) for a, b in spans] for url, spans in raw.items()
                }
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                raise GpufleetError(
                    f"{path}: not the record of imported windows gpufleet writes ({exc})"
                ) from exc

    def of(self, url: str) -> list[tuple[int, int]]:
        return self.spans.get(url, [])

    def missing(self, url: str, start_s: int, end_s: int) -> list[tuple[int, int]]:
        """The parts of [start, end) not yet imported from `url`."""
        pieces = []
        cursor = start_s
        for a, b in self.of(url):
            if b <= cursor:
                continue
            if a >= end_s:
                break
            if a > cursor:
                pieces.append((cursor, a))
            cursor = max(cursor, b)
        if cursor < end_s:
            pieces.append((cursor, end_s))
        return pieces

    def add(self, url: str, start_s: int, end_s: int) -> None:
        """Record [start, end) as imported, and save."""
        spans = sorted([*self.of(url), (start_s, end_s)])
        joined: list[tuple[int, int]] = []
        for a, b in spans:
            if joined and a <= joined[-1][1]:
                joined[-1] = (joined[-1][0], max(joined[-1][1], b))
            else:
                joined.append((a, b))
        self.spans[url] = joined
        data = {u: [list(s) for s in spans] for u, spans in sorted(self.spans.items())}
        write_text_atomically(self.path, json.dumps(data, indent=1) + "\n")
