"""`gpufleet status`: whether the input arrives, and where the warehouse stands.

Read-only: the raw samples location is listed, and the published warehouse is opened
read-only (never the writers' lock, so it answers while an ingest or build runs). It shows
the last sample file of each host, the last ingest that loaded files and the last build (from
`loaded_files` and `build_state.watermark`), the backlog (files listed but not loaded yet),
and the hosts and the input that are stale by `[ingest] stale_after_minutes`, judged as
`gpufleet ingest` judges them (`gpufleet.warehouse.raw.arrival`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import duckdb

from gpufleet.collectors.schema import folder_host
from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.base.sample_files import SampleFile, Unreadable
from gpufleet.warehouse.build.retention import expired_before, in_partition_before
from gpufleet.warehouse.publish.read_only import connect_read_only
from gpufleet.warehouse.raw.arrival import (
    ARRIVALS_TABLE,
    host_of,
    iso_ns,
    judge_input,
    location_state,
    newest_by_host,
    root_unreadable,
)
from gpufleet.warehouse.raw.scan import list_sample_files

NO_CLUSTER = "-"  # the site column of a host whose folder names none
# A host silent this long has left the fleet (or is the weekly report's business): it is
# listed, but no longer stale, so that a retired host does not keep `status` failing.
RETIRED_AFTER = dt.timedelta(days=7)


@dataclass(frozen=True, kw_only=True)
class HostStatus:
    host: str
    cluster: str | None  # None: not known yet (printed as '-')
    last_file_ns: int  # when its newest sample file arrived (listed or loaded), ns
    last_sample: dt.datetime | None  # its newest sample's ts (None: no file says)
    files: int  # its sample files, listed or loaded
    is_stale: bool  # no file for longer than stale_after_minutes (and not retired)
    is_retired: bool  # no file for longer than RETIRED_AFTER


class AllocatedOnly(NamedTuple):
    """A host the scheduler allocated GPUs on, with no collector's samples of them."""

    host: str
    cluster: str | None
    last_day: dt.date
    gpu_hours: float  # allocated there in the last ALLOCATED_DAYS days


@dataclass(frozen=True, kw_only=True)
class FleetStatus:
    location: str
    location_state: str  # ok, unreadable, missing, empty
    stale_after_minutes: int
    problem: str  # the one line `gpufleet ingest` fails with; "" when the input is fine
    note: str
    files_loaded: int
    last_ingest: dt.datetime | None  # the last ingest that loaded (or compacted) a file
    last_build: dt.datetime | None
    backlog_files: int
    backlog_bytes: int
    hosts: tuple[HostStatus, ...]
    unreadable: tuple[Unreadable, ...] = ()  # the folders (or files) the listing could not read
    # Slurm nodes with GPU-hours allocated but no samples (alloc_only_daily) in the last days
    allocated_only: tuple[AllocatedOnly, ...] = ()

    @property
    def stale_hosts(self) -> tuple[str, ...]:
        """The stale hosts' names (`<host>@<site>` at a site: two sites' hosts may share one)."""
        return tuple(
            f"{host.host}@{host.cluster}" if host.cluster else host.host
            for host in self.hosts
            if host.is_stale
        )

    @property
    def is_stale(self) -> bool:
        """What makes `gpufleet status` exit 1."""
        return bool(self.problem or self.stale_hosts)

    def to_json(self) -> dict[str, Any]:
        def iso(ts: dt.datetime | None) -> str | None:
            return ts.astimezone(dt.UTC).isoformat(timespec="seconds") if ts else None

        return {
            "location": self.location,
            "location_state": self.location_state,
            "stale_after_minutes": self.stale_after_minutes,
            "is_stale": self.is_stale,
            "problem": self.problem or None,
            "note": self.note or None,
            "files_loaded": self.files_loaded,
            "last_ingest_ts": iso(self.last_ingest),
            "last_build_ts": iso(self.last_build),
            "backlog": {"files": self.backlog_files, "bytes": self.backlog_bytes},
            "hosts": [
                {
                    "host": host.host,
                    "cluster": host.cluster,
                    "last_sample_ts": iso(host.last_sample),
                    "last_file_ts": iso_ns(host.last_file_ns),
                    "files": host.files,
                    "is_stale": host.is_stale,
                    "is_retired": host.is_retired,
                }
                for host in self.hosts
            ],
            "stale_hosts": list(self.stale_hosts),
            "unreadable": [
                {"path": item.path, "reason": item.reason, "is_folder": item.is_folder}
                for item in self.unreadable
            ],
            "allocated_only": [
                {
                    "host": node.host,
                    "cluster": node.cluster,
                    "last_day": node.last_day.isoformat(),
                    "alloc_gpu_hours": round(node.gpu_hours, 3),
                }
                for node in self.allocated_only
            ],
        }

    def __str__(self) -> str:
        def when(ts: dt.datetime | None) -> str:
            return ts.astimezone(dt.UTC).isoformat(timespec="seconds") if ts else "never"

        lines = [
            f"raw samples: {self.location} ({self.location_state}), files loaded: "
            f"{self.files_loaded:,}",
            f"last ingest: {when(self.last_ingest)}",
            f"last build:  {when(self.last_build)}",
            f"backlog:     {self.backlog_files:,} files, {self.backlog_bytes:,} bytes not loaded",
        ]
        minutes = self.stale_after_minutes
        rule = f"no file for {minutes} minutes" if minutes else "check off"
        lines.append(f"hosts: {len(self.hosts):,}, {len(self.stale_hosts):,} stale ({rule})")
        if self.hosts:
            width = max(len("host"), *(len(printable(h.host)) for h in self.hosts))
            lines.append(
                f"  {'host':<{width}}  cluster  last sample                last file arrived"
                "          files"
            )
            for host in self.hosts:
                mark = "  stale" if host.is_stale else "  retired" if host.is_retired else ""
                lines.append(
                    f"  {printable(host.host):<{width}}  {host.cluster or NO_CLUSTER:<7}  "
                    f"{when(host.last_sample):<25}  {iso_ns(host.last_file_ns):<25}  "
                    f"{host.files:>5,}{mark}"
                )
        if self.allocated_only:
            lines.append(
                f"Slurm nodes with allocations but no samples (last {ALLOCATED_DAYS} days): "
                f"{len(self.allocated_only):,}"
            )
            for node in self.allocated_only:
                site = f" at {printable(node.cluster)}" if node.cluster else ""
                lines.append(
                    f"  {printable(node.host)}{site}: {node.gpu_hours:,.1f} GPU-hours allocated,"
                    f" not measured, last on {node.last_day}"
                )
        lines += [f"unreadable: {item}" for item in self.unreadable]
        if self.note:
            lines.append(f"note: {printable(self.note)}")
        if self.problem:
            lines.append(f"stale: {printable(self.problem)}")
        return "\n".join(lines)


def read_status(config: Config, *, now: dt.datetime | None = None) -> FleetStatus:
    """The status of `config`'s data directory at `now` (default: the real now)."""
    now = now or dt.datetime.now(dt.UTC)
    listing = list_sample_files(config)
    files = listing.files
    warehouse = _Warehouse(backlog=[(f.path, f.size_bytes) for f in files])
    if config.warehouse_path.is_file():
        con = connect_read_only(config)
        try:
            warehouse = _read_warehouse(con, files)
        finally:
            con.close()
    loaded = warehouse.loaded
    # When each host's files last arrived: the record ingests keep, and the files listed now.
    arrived = dict(warehouse.arrivals)
    for host, ns in newest_by_host(files, now=now).items():
        arrived[host] = max(arrived.get(host, ns), ns)
    minutes = config.ingest.stale_after_minutes
    samples = _newest_samples(config, files, loaded)
    hosts = _hosts(files, loaded, arrived, samples, now=now, stale_after_minutes=minutes)
    every_file = (*(row[2] for row in loaded), *(f.mtime_ns for f in files))
    state = location_state(
        config.samples_dir, len(files), unreadable=root_unreadable(config, listing.unreadable)
    )
    check = judge_input(
        location=config.samples_dir,
        state=state,
        files_loaded_before=len(loaded),
        newest_ns=max(arrived.values(), default=None) or max(every_file, default=None),
        stale_after_minutes=minutes,
        now=now,
        unreadable=listing.unreadable,
    )
    return FleetStatus(
        location=str(config.samples_dir),
        location_state=state,
        stale_after_minutes=minutes,
        problem=check.problem,
        note=check.note,
        files_loaded=len(loaded),
        last_ingest=max((row[3] for row in loaded), default=None),
        last_build=warehouse.last_build,
        backlog_files=len(warehouse.backlog),
        backlog_bytes=sum(size for _, size in warehouse.backlog),
        hosts=hosts,
        unreadable=listing.unreadable,
        allocated_only=warehouse.allocated_only,
    )


@dataclass(frozen=True, kw_only=True)
class _Warehouse:
    """What the published warehouse says."""

    # path, size_bytes, mtime_ns, loaded_at, max_ts (its newest sample)
    loaded: list[tuple[str, int, int, dt.datetime, dt.datetime | None]] = field(
        default_factory=list
    )
    arrivals: list[tuple[str, int]] = field(default_factory=list)  # host, newest file's mtime
    last_build: dt.datetime | None = None
    backlog: list[tuple[str, int]] = field(default_factory=list)  # path, size_bytes
    allocated_only: tuple[AllocatedOnly, ...] = ()


def _read_warehouse(con: duckdb.DuckDBPyConnection, files: Sequence[SampleFile]) -> _Warehouse:
    """Each loaded file (path, size, mtime, load time), each host's last arrival, the last
    build, and the listed files not loaded (or loaded at another size or mtime)."""
    loaded = con.execute(
        "select path, size_bytes, mtime_ns, loaded_at, max_ts from loaded_files"
    ).fetchall()
    arrivals = (
        con.execute(f"select host, last_file_mtime_ns from {ARRIVALS_TABLE}").fetchall()
        if has_table(con, ARRIVALS_TABLE)
        else []
    )
    built = (
        con.execute("select max(built_at) from build_state.watermark").fetchone()
        if has_table(con, "build_state.watermark")
        else None
    )
    known = {path: (size, mtime) for path, size, mtime, _, _ in loaded}
    cut = expired_before(con)  # files of expired partitions are never loaded: no backlog
    return _Warehouse(
        loaded=loaded,
        arrivals=arrivals,
        last_build=built[0] if built else None,
        backlog=[
            (f.path, f.size_bytes)
            for f in files
            if known.get(f.path) != (f.size_bytes, f.mtime_ns)
            and (cut is None or not in_partition_before(f.path, cut))
        ],
        allocated_only=_allocated_only(con),
    )


# How far back `status` looks for Slurm nodes allocated without samples.
ALLOCATED_DAYS = 7


def _allocated_only(con: duckdb.DuckDBPyConnection) -> tuple[AllocatedOnly, ...]:
    """The hosts of alloc_only_daily's last ALLOCATED_DAYS days (a warehouse built before
    the mart has none)."""
    if not has_table(con, "alloc_only_daily"):
        return ()
    rows = con.execute(
        """
        select host, cluster, max(day), sum(alloc_gpu_hours),
        from alloc_only_daily
        where host is not null
            and day > (select max(day) from alloc_only_daily) - $days::integer
        group by host, cluster
        order by host, cluster nulls first
        """,
        {"days": ALLOCATED_DAYS},
    ).fetchall()
    return tuple(AllocatedOnly(str(h), c, d, float(g or 0.0)) for h, c, d, g in rows)


def _newest_samples(
    config: Config,
    files: Sequence[SampleFile],
    loaded: Sequence[tuple[str, int, int, dt.datetime, dt.datetime | None]],
) -> dict[str, dt.datetime]:
    """Each host's newest sample time: the loaded files' recorded max_ts, and, for a host
    whose newest file is not loaded yet, that file's own ts statistics (its footer alone)."""
    newest: dict[str, dt.datetime] = {}
    for path, _, _, _, max_ts in loaded:
        host = host_of(path)
        if host is not None and max_ts is not None:
            newest[host] = max(newest.get(host, max_ts), max_ts)
    known = {path for path, *_ in loaded}
    latest: dict[str, SampleFile] = {}
    for file in files:
        host = host_of(file.path)
        if host is None or file.path in known:
            continue
        if host not in latest or file.mtime_ns > latest[host].mtime_ns:
            latest[host] = file
    for host, file in latest.items():
        ts = _footer_max_ts(config.data_dir / file.path)
        if ts is not None:
            newest[host] = max(newest.get(host, ts), ts)
    return newest


def _footer_max_ts(path: Path) -> dt.datetime | None:
    """The largest `ts` a Parquet file's row-group statistics give (None: none, or the file
    cannot be read: `ingest` names such a file)."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)
        column = metadata.schema.names.index("ts")
        highs = [
            metadata.row_group(group).column(column).statistics
            for group in range(metadata.num_row_groups)
        ]
        values = [s.max for s in highs if s is not None and s.has_min_max]
    except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
        return None
    best = max((v for v in values if isinstance(v, dt.datetime)), default=None)
    if best is None:
        return None
    return best if best.tzinfo is not None else best.replace(tzinfo=dt.UTC)


def _hosts(
    files: Sequence[SampleFile],
    loaded: Sequence[tuple[str, int, int, dt.datetime, dt.datetime | None]],
    arrived: dict[str, int],
    samples: dict[str, dt.datetime],
    *,
    now: dt.datetime,
    stale_after_minutes: int,
) -> tuple[HostStatus, ...]:
    """Each host's last arrival and number of files (listed or loaded, a path counted once);
    a host with no arrival recorded (a warehouse from before the record) by its newest
    file's mtime. The stale ones first, then by name."""
    times = {path: mtime for path, _, mtime, _, _ in loaded}
    times.update((f.path, f.mtime_ns) for f in files)
    newest: dict[str, int] = {}
    count: dict[str, int] = {}
    for path, mtime_ns in times.items():
        host = host_of(path)
        if host is None:
            continue
        newest[host] = max(newest.get(host, mtime_ns), mtime_ns)
        count[host] = count.get(host, 0) + 1
    newest.update((host, ns) for host, ns in arrived.items() if host in newest)
    stale_ns = int((now.timestamp() - stale_after_minutes * 60) * 1e9)
    retired_ns = int((now - RETIRED_AFTER).timestamp() * 1e9)
    hosts = [
        HostStatus(
            # a site's folder is host=<host>@<site> (docs/sites.md)
            host=folder_host(folder)[0],
            cluster=folder_host(folder)[1],
            last_file_ns=ns,
            last_sample=samples.get(folder),
            files=count[folder],
            is_stale=stale_after_minutes > 0 and retired_ns <= ns < stale_ns,
            is_retired=ns < retired_ns,
        )
        for folder, ns in newest.items()
    ]
    return tuple(sorted(hosts, key=lambda h: (not h.is_stale, h.host, h.cluster or "")))
