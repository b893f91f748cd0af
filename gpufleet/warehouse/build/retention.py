"""`[retention]`: raw samples past `samples_days`, weekly reports past `reports_weeks`.

At the end of a build, in its transaction (`expire_samples`): the marts' rows of the local
days that expire are kept (`kept.py`: later builds, `--full` too, leave them as they are);
then the samples before the first UTC date partition that can hold a retained sample leave
`samples_stored`, `samples_attributed_rows` and the lake's list, and their files
`loaded_files`. Once the build is published (`after_publish`), those partitions' files are
deleted (the published warehouse no longer names them), and so are the weekly report
folders past `reports_weeks`. docs/operations.md#retention.
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import zoneinfo
from dataclasses import dataclass
from pathlib import Path

import duckdb

from gpufleet.config import Config
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.base.deletes import delete_in_key_ranges
from gpufleet.warehouse.build.kept import CLOSED_ROW, keep_days
from gpufleet.warehouse.build.models import MACROS_FILE_NAME, SQL_DIR, set_variables
from gpufleet.warehouse.lake.samples import refresh_samples_view
from gpufleet.warehouse.publish import connect_read_only
from gpufleet.warehouse.publish.log import current_generation

_DATE_DIR = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_WEEK_DIR = re.compile(r"^(\d{4})-W(\d{2})$")


@dataclass(frozen=True, kw_only=True)
class Expired:
    """What retention deleted in a build (the files go once it is published)."""

    retained_from: dt.date | None = None  # the oldest local day whose samples are all kept
    samples: int = 0  # samples deleted: rows of samples_stored and of the lake's files
    files: int = 0  # raw sample files of expired UTC date partitions
    size_bytes: int = 0

    def __str__(self) -> str:
        return (
            f"retention: {self.samples:,} samples and {self.files:,} raw sample files "
            f"({_size(self.size_bytes)}) of the days before {self.retained_from} deleted; the "
            "marts keep those days"
        )


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 1e6:,.1f} MB" if size_bytes >= 100_000 else f"{size_bytes:,} bytes"


def retained_from(config: Config, today: dt.date | None = None) -> dt.date | None:
    """The oldest local day `[retention] samples_days` keeps (None: keep all)."""
    if config.retention.samples_days <= 0:
        return None
    zone = zoneinfo.ZoneInfo(config.timezone)
    return (today or dt.datetime.now(zone).date()) - dt.timedelta(config.retention.samples_days)


def expire_samples(
    con: duckdb.DuckDBPyConnection, config: Config, *, today: dt.date | None = None
) -> Expired:
    """Delete the samples past `samples_days` from the warehouse (call at the end of a
    build: the marts hold every sample), keeping the marts' rows of their days."""
    oldest = retained_from(config, today)
    if oldest is None:
        return Expired()
    # Whole UTC date partitions go, those wholly before the oldest day's first local
    # midnight, in the configured timezone or a site's ([clusters.<site>] timezone): the
    # first one kept may hold the oldest day's samples of any site.
    zones = {config.timezone, *(zone for _, zone in config.sites)}
    midnight = min(
        dt.datetime.combine(oldest, dt.time(), zoneinfo.ZoneInfo(zone)) for zone in zones
    )
    expired_before = midnight.astimezone(dt.UTC).date()
    row = con.execute(
        "select max(retained_from), max(expired_before) from build_state.retention"
    ).fetchone()
    before, expired_already = row if row else (None, None)
    if before is None or oldest > before:
        # a run's day is the local day of its start at its site (kept.RUN_DAY)
        set_variables(con, config)
        con.execute((SQL_DIR / MACROS_FILE_NAME).read_text(encoding="utf-8"))
        keep_days(
            con,
            f"{{day}} >= $since and {{day}} < $oldest and not {CLOSED_ROW}",
            {"since": before or dt.date(1, 1, 1), "oldest": oldest},
        )
        con.execute("delete from build_state.retention")
        con.execute("insert into build_state.retention values (?, ?)", [oldest, expired_before])
    cut = dt.datetime.combine(expired_before, dt.time(), dt.UTC)
    deleted = con.execute("delete from samples_stored where ts < ?", [cut]).fetchone()
    samples = int(deleted[0]) if deleted else 0
    if has_table(con, "samples_attributed_rows") and not _none_before(
        con, cut, expired_already is not None and expired_already >= expired_before
    ):
        # a few rows of every series: a statement per range of series (base/deletes.py)
        delete_in_key_ranges(con, "samples_attributed_rows", "ts < ?", [cut], key="series_id")
    lake = con.execute(
        "delete from build_state.lake_files where day < ? returning row_count", [expired_before]
    ).fetchall()
    samples += sum(int(row_count) for (row_count,) in lake)
    con.execute(
        """
        delete from loaded_files
        where try_cast(regexp_extract(path, '(^|/)date=(\\d{4}-\\d{2}-\\d{2})/', 2) as date) < ?
        """,
        [expired_before],
    )
    if lake:
        refresh_samples_view(con, config)
    files, size_bytes = _partition_files(config, expired_before)
    if samples or lake:
        # Rows left samples_attributed_rows by no key the other slot can replay: it copies.
        con.execute("insert into build_state.full_builds values (?)", [current_generation(con)])
    return Expired(retained_from=oldest, samples=samples, files=files, size_bytes=size_bytes)


def _none_before(con: duckdb.DuckDBPyConnection, cut: dt.datetime, expired: bool) -> bool:
    """Whether samples_attributed_rows is known to hold no row before `cut` without reading
    it: an earlier build deleted them (`expired`: build_state.retention records that cut or
    a later one, committed with its deletes), and this publish is no full build and added
    rows from `cut` on only (each series' since_ts it logged, publish/log.py). A delete
    would read every retained day's `ts` to find nothing: the row groups it deleted from
    keep their old least `ts`, which the zone maps go by."""
    if not expired or not has_table(con, "build_state.replaced"):
        return False
    ((full, added_from),) = con.execute(
        """
        select
            exists (from build_state.full_builds where generation = $generation),
            (select min(since_ts) from build_state.replaced
             where generation = $generation and table_name = 'samples_attributed_rows'),
        """,
        {"generation": current_generation(con)},
    ).fetchall()
    return not full and (added_from is None or added_from >= cut)


def expired_before(con: duckdb.DuckDBPyConnection) -> dt.date | None:
    """The first UTC date whose `date=` partition retention keeps (None: nothing expired
    yet): ingest loads no file of an earlier one, and `after_publish` deletes them."""
    if not has_table(con, "build_state.retention"):
        return None
    ((day,),) = con.execute("select max(expired_before) from build_state.retention").fetchall()
    return day


def in_partition_before(path: str, day: dt.date) -> bool:
    """Whether `path` (a file's, with '/' separators) lies in a `date=` folder before `day`."""
    for part in path.split("/")[:-1]:
        match = _DATE_DIR.match(part)
        if match:
            try:
                return dt.date.fromisoformat(match.group(1)) < day
            except ValueError:
                return False
    return False


def _expired_partitions(config: Config, before: dt.date) -> list[Path]:
    """The raw samples' `date=` folders of UTC dates before `before`."""
    try:
        entries = list(config.samples_dir.iterdir())
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        match = _DATE_DIR.match(entry.name)
        if match and entry.is_dir() and not entry.is_symlink():
            try:
                day = dt.date.fromisoformat(match.group(1))
            except ValueError:
                continue
            if day < before:
                found.append(entry)
    return sorted(found)


def _files_and_bytes(folder: Path) -> tuple[int, int]:
    """How many files, and bytes, a folder holds (its subfolders' included)."""
    sizes = [path.stat().st_size for path in folder.rglob("*") if path.is_file()]
    return len(sizes), sum(sizes)


def _partition_files(config: Config, before: dt.date) -> tuple[int, int]:
    """How many files, and bytes, the expired partitions hold."""
    counts = [_files_and_bytes(folder) for folder in _expired_partitions(config, before)]
    return sum(files for files, _ in counts), sum(size for _, size in counts)


def after_publish(config: Config, *, today: dt.date | None = None) -> tuple[str, ...]:
    """Once a build is published: delete the raw partitions its warehouse expired (read
    from the published warehouse, so a build inside a longer transaction deletes them after
    the next one), and the weekly reports past `reports_weeks`; one line for the reports."""
    if config.retention.samples_days > 0 and config.warehouse_path.exists():
        with connect_read_only(config) as con:
            before = expired_before(con)
        if before is not None:
            for folder in _expired_partitions(config, before):
                shutil.rmtree(folder, ignore_errors=True)
    return expire_reports(config, today=today)


def expire_reports(config: Config, *, today: dt.date | None = None) -> tuple[str, ...]:
    """Delete `reports/<YYYY-Www>/` folders of weeks more than `reports_weeks` before this
    one (local); one line saying what went, or none."""
    weeks = config.retention.reports_weeks
    if weeks <= 0 or not config.reports_dir.is_dir():
        return ()
    day = today or dt.datetime.now(zoneinfo.ZoneInfo(config.timezone)).date()
    this_monday = day - dt.timedelta(days=day.weekday())
    oldest = this_monday - dt.timedelta(weeks=weeks)
    folders = size_bytes = 0
    for entry in sorted(config.reports_dir.iterdir()):
        match = _WEEK_DIR.match(entry.name)
        if not match or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            monday = dt.date.fromisocalendar(int(match.group(1)), int(match.group(2)), 1)
        except ValueError:
            continue
        if monday < oldest:
            size_bytes += _files_and_bytes(entry)[1]
            shutil.rmtree(entry)
            folders += 1
    if not folders:
        return ()
    week = f"{oldest.isocalendar()[0]}-W{oldest.isocalendar()[1]:02d}"
    return (f"retention: {folders} weekly reports ({_size(size_bytes)}) before {week} deleted",)
