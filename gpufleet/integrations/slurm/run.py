"""`gpufleet import slurm`: sacct's jobs and squeue's GPU indices -> allocation rows and
job records.

One run asks sacct for every job that ran in `[since, now)` (`--allusers --allocations`),
where `since` is the last run's end less an hour (records reach slurmdbd late when it was
down; a job seen twice adds nothing), and squeue for the GPUs running jobs hold. A started
job with GPUs becomes one row per GPU, team from its account (`accounts.py`); a job that
ended has its rows closed. A job that began and ended between two runs was never seen by
squeue: sacct does not say which GPUs it held, so it gets no rows (listed in the summary).
Every started GPU job, placed or not, gets a job record (`raw/jobs/`): its account's team
is what the collector's gpustat evidence (`alloc_job_id`) and its processes' job id are
attributed to. A job whose record cannot be right (a time before `[ingest] earliest` or
more than `[ingest] max_clock_skew_minutes` ahead, as a sample's; an end before its start:
`payload.py`) is refused: named in a warning, counted in the summary, and written nowhere,
so that no file the ingest reads holds it.

Everything is read and checked before anything is written: a failed import changes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NamedTuple

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.files import write_text_atomically
from gpufleet.integrations.slurm.accounts import ACCOUNTS_FILE, Teams, read_accounts
from gpufleet.integrations.slurm.commands import is_empty, open_saved, run_command
from gpufleet.integrations.slurm.files import (
    RECORD_FILE,
    AllocationRow,
    JobRecord,
    JobUpdate,
    day_file,
    merge,
    merge_jobs,
    read_jobs,
    read_rows,
    read_watermark,
    render,
    render_jobs,
    write_watermark,
)
from gpufleet.integrations.slurm.nodes import (
    HOSTS_LOOKBACK,
    HostNames,
    SiteNames,
    collector_hosts,
    compact_hostlist,
)
from gpufleet.integrations.slurm.payload import Payload, Refused
from gpufleet.integrations.slurm.sacct import SlurmJob, parse_sacct
from gpufleet.integrations.slurm.squeue import HeldGpus, parse_squeue
from gpufleet.integrations.slurm.stream import parse_stream

OVERLAP = dt.timedelta(hours=1)  # each window starts this long before the last one ended
REFUSALS_SHOWN = 10  # refused jobs named one per line; the others counted in one


@dataclass(frozen=True, kw_only=True)
class SlurmImport:
    """What one import did, for the command's summary and the flow's log."""

    jobs: int  # jobs sacct (and squeue) listed
    gpu_jobs: int  # of those, started jobs with GPUs
    rows_added: int
    rows_closed: int
    files: tuple[Path, ...]  # allocation files written
    job_records: int = 0  # job records added or updated
    job_files: tuple[Path, ...] = ()  # job files written
    unplaced: tuple[str, ...] = ()  # GPU jobs with no indices: not seen running by squeue
    mig: tuple[str, ...] = ()  # jobs on MIG devices (no GPU indices)
    unknown_nodes: tuple[str, ...] = ()  # nodes of jobs with no collector samples
    refused: tuple[str, ...] = ()  # jobs left out: a time out of range, an end before start
    source: str = ""  # "sacct <since> to <until>", or the saved file read

    def __str__(self) -> str:
        lines = [
            f"import slurm: {self.jobs:,} jobs from {self.source}, {self.gpu_jobs:,} with "
            f"GPUs; {self.rows_added:,} allocation rows added, {self.rows_closed:,} closed, "
            f"in {len(self.files)} file(s); {self.job_records:,} job records written, in "
            f"{len(self.job_files)} file(s)"
        ]
        if self.unplaced:
            lines.append(
                f"  {len(self.unplaced):,} GPU job(s) never seen running by squeue, so with no "
                f"GPU indices and no rows (a job record only): {_some(self.unplaced)}"
            )
        if self.mig:
            lines.append(f"  {len(self.mig):,} job(s) on MIG devices, no rows: {_some(self.mig)}")
        if self.refused:
            lines.append(
                f"  {len(self.refused):,} job(s) refused, not imported (a time out of range or "
                f"an end before its start): {_some(self.refused)}"
            )
        if self.unknown_nodes:
            lines.append(f"  {unmeasured_line(self.unknown_nodes)}")
        return "\n".join(lines)


def unmeasured_line(nodes: tuple[str, ...]) -> str:
    """The line that names the nodes with jobs and no collector samples."""
    return (
        f"{len(nodes):,} node(s) have Slurm jobs but no gpufleet samples: "
        f"{compact_hostlist(nodes)}: their GPU-hours come from allocations alone"
    )


def _some(names: tuple[str, ...], shown: int = 10) -> str:
    more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _key(row: AllocationRow) -> tuple[str, str, int, dt.datetime]:
    return (row.job_id, row.host, row.gpu_index, row.start_ts)


def _utc(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _held(job: SlurmJob, held: dict[str, HeldGpus]) -> HeldGpus | None:
    """What squeue says the job holds: a running job's GPUs, never given to an earlier
    run of a requeued job (same id, other start, already ended)."""
    found = held.get(job.job_id)
    if found is None or (job.end_ts is not None and job.start_ts != found.job.start_ts):
        return None
    return found


class _Found(NamedTuple):
    job: SlurmJob
    update: JobUpdate  # its allocation rows (none when squeue did not see its GPUs)
    record: JobRecord


def _updates(
    jobs: list[SlurmJob],
    held: dict[str, HeldGpus],
    teams: Teams,
    host_of: Callable[[str], str],
    since: dt.datetime | None,
    now: dt.datetime,
) -> tuple[list[_Found], list[str]]:
    """Each started GPU job's update and record, and the jobs on MIG devices."""
    found: list[_Found] = []
    mig: list[str] = []
    for job in jobs:
        gpus = _held(job, held)
        if job.start_ts is None or (job.gpus == 0 and gpus is None):
            continue
        if since is not None and job.end_ts is not None and job.end_ts < since:
            continue
        team = teams.team(job.account, job.start_ts, job.cluster)
        rows: list[AllocationRow] = []
        for node in gpus.nodes if gpus else ():
            if node.mig:
                mig.append(job.job_id)
                continue
            rows.extend(
                AllocationRow(
                    job.job_id, job.user, team, host_of(node.node), index, job.start_ts, None
                )
                for index in node.gpu_indices
            )
        nodes = job.nodes or (gpus.job.nodes if gpus else ())
        record = JobRecord(
            job_id=job.job_id,
            job_id_raw=job.job_id_raw or (gpus.job.job_id_raw if gpus else None),
            cluster=job.cluster,
            user=job.user,
            account=job.account,
            partition=job.partition,
            state=job.state,
            team=team,
            gpus=job.gpus or (gpus.job.gpus if gpus else 0),
            hosts=tuple(dict.fromkeys(host_of(node) for node in nodes)),
            start_ts=job.start_ts,
            end_ts=job.end_ts,
            seen_ts=now,
        )
        update = JobUpdate(job.job_id, job.start_ts, job.end_ts, tuple(rows), job.cluster)
        found.append(_Found(job, update, record))
    return found, sorted(set(mig))


class _Outputs(NamedTuple):
    jobs: list[SlurmJob]  # sacct's, and running jobs only squeue knows yet
    held: dict[str, HeldGpus]  # squeue's, by job id
    refused: list[Refused]  # the jobs of either left out
    start: dt.datetime | None  # the window's start (None: all of a saved output)
    described: str  # where the jobs came from, for the summary


def _outputs(
    config: Config,
    since: dt.datetime | None,
    sacct_json: Path | None,
    squeue_json: Path | None,
    now: dt.datetime,
    first_window: dt.timedelta | None,
) -> _Outputs:
    """Run sacct and squeue (or read their saved output) and parse both, each job as its
    output is read (`stream.py`): the whole output is never held at once."""
    with ExitStack() as stack:
        start = since
        if sacct_json is not None:
            sacct, sacct_source = open_saved(sacct_json, stack), str(sacct_json)
            described = sacct_source
        else:
            watermark = read_watermark(config.data_dir / "imports" / RECORD_FILE)
            start = since or (watermark - OVERLAP if watermark else None)
            if start is None and first_window is not None:
                start = now - first_window
            if start is None:
                raise GpufleetError(
                    "import slurm: the first run needs --since (e.g. --since "
                    "2026-11-01T00:00:00Z); later runs start where the last one ended"
                )
            sacct = run_command(
                [
                    "sacct",
                    "--json",
                    "--allusers",
                    "--allocations",
                    "--duplicates",  # each run of a requeued job, with its own start and end
                    f"--starttime={_utc(start)}",
                    f"--endtime={_utc(now)}",
                ],
                stack,
            )
            sacct_source = "sacct --json"
            described = f"sacct {start:%Y-%m-%dT%H:%M:%SZ} to {now:%Y-%m-%dT%H:%M:%SZ}"
        squeue: IO[bytes] | None = None
        if squeue_json is not None:
            squeue, squeue_source = open_saved(squeue_json, stack), str(squeue_json)
        elif sacct_json is None:
            squeue = run_command(["squeue", "--json", "--all"], stack)
            squeue_source = "squeue --json"
        ingest = config.ingest

        def sacct_jobs(payload: Payload) -> tuple[list[SlurmJob], list[Refused]]:
            refused: list[Refused] = []
            return parse_sacct(payload, now=now, ingest=ingest, refused=refused), refused

        def squeue_held(payload: Payload) -> tuple[dict[str, HeldGpus], list[Refused]]:
            refused: list[Refused] = []
            return parse_squeue(payload, now=now, ingest=ingest, refused=refused), refused

        jobs, refused = parse_stream(sacct, source=sacct_source, parse=sacct_jobs)
        held: dict[str, HeldGpus] = {}
        if squeue and not is_empty(squeue):  # else no squeue, or none printed
            held, refused_running = parse_stream(squeue, source=squeue_source, parse=squeue_held)
            refused += refused_running
    # sacct lags: a running job only squeue knows yet is added (one sacct refused is not)
    known = {job.job_id for job in jobs} | {job.job_id for job in refused}
    jobs.extend(h.job for job_id, h in held.items() if job_id not in known)
    return _Outputs(jobs, held, refused, start, described)


class _Plan(NamedTuple):
    contents: dict[Path, str]  # the allocation files to write, and their new content
    added: int
    closed: int
    placed: set[tuple[str, dt.datetime]]  # (job id, start) of the jobs with rows
    job_contents: dict[Path, str]  # the job files to write, and their new content
    job_records: int  # records added or changed


def _changed(path: Path, text: str) -> bool:
    return not path.is_file() or path.read_text(encoding="utf-8") != text


def _plan(config: Config, found: list[_Found]) -> _Plan:
    """Each day file the updates change, merged with what it holds."""
    by_file: dict[Path, list[JobUpdate]] = {}
    by_job_file: dict[Path, list[JobRecord]] = {}
    for item in found:
        path = day_file(config.allocations_dir, item.job.cluster, item.update.start_ts)
        by_file.setdefault(path, []).append(item.update)
        path = day_file(config.jobs_dir, item.job.cluster, item.record.start_ts)
        by_job_file.setdefault(path, []).append(item.record)
    plan = _Plan({}, 0, 0, set(), {}, 0)
    added = closed = job_records = 0
    for path, updates in sorted(by_file.items()):
        existing = read_rows(path)
        rows = merge(existing, updates)
        plan.placed.update((row.job_id, row.start_ts) for row in rows)
        added += len(rows) - len(existing)
        was_open = {_key(row) for row in existing if row.end_ts is None}
        closed += sum(1 for row in rows if row.end_ts is not None and _key(row) in was_open)
        text = render(rows)
        if rows and _changed(path, text):
            plan.contents[path] = text
    for path, seen in sorted(by_job_file.items()):
        known = read_jobs(path)
        records = merge_jobs(known, seen)
        job_records += len(set(records) - set(known))
        text = render_jobs(records)
        if records and _changed(path, text):
            plan.job_contents[path] = text
    return plan._replace(added=added, closed=closed, job_records=job_records)


def import_slurm(
    config: Config,
    *,
    since: dt.datetime | None = None,
    sacct_json: Path | None = None,
    squeue_json: Path | None = None,
    now: dt.datetime | None = None,
    first_window: dt.timedelta | None = None,
    warn: Callable[[str], object] = print,
) -> SlurmImport:
    """Import the jobs of `[since, now)` from sacct and squeue, or from their saved `--json`
    output. `since` defaults to the last run's end less an hour, and on the first run to
    `now - first_window` (without it, the first run needs `since`)."""
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).replace(microsecond=0)
    first_import = read_watermark(config.data_dir / "imports" / RECORD_FILE) is None
    jobs, held, refused, start, described = _outputs(
        config, since, sacct_json, squeue_json, now, first_window
    )
    site_of = SiteNames(config)  # a Slurm cluster's jobs as its site's
    jobs = [job._replace(cluster=site_of(job.cluster)) for job in jobs]
    teams = Teams(
        read_accounts(config.ref_dir / ACCOUNTS_FILE),
        team_from=config.slurm.team_from,
        timezone=config.timezone,
        sites=config.sites,
    )
    starts = [job.start_ts for job in jobs if job.start_ts is not None]
    first_day = max(min(starts, default=now), now - HOSTS_LOOKBACK).date()
    host_of = HostNames(collector_hosts(config, first_day, now.date()))
    found, mig = _updates(jobs, held, teams, host_of, start, now)
    plan = _plan(config, found)  # everything read and checked: from here on, writes
    for item in refused[:REFUSALS_SHOWN]:
        warn(f"import slurm: {item.line}")
    if len(refused) > REFUSALS_SHOWN:
        warn(f"import slurm: {len(refused) - REFUSALS_SHOWN:,} more job(s) refused likewise")
    if host_of.unknown and first_import:
        warn(f"import slurm: {unmeasured_line(tuple(sorted(host_of.unknown)))}")
    for path, text in (*plan.contents.items(), *plan.job_contents.items()):
        write_text_atomically(path, text)
    if sacct_json is None:
        write_watermark(config.data_dir / "imports" / RECORD_FILE, now)
    imported = {item.job.job_id for item in found}
    unplaced = [
        item.job.job_id
        for item in found
        if (item.job.job_id, item.update.start_ts) not in plan.placed
    ]
    return SlurmImport(
        jobs=len(jobs),
        gpu_jobs=len(found),
        rows_added=plan.added,
        rows_closed=plan.closed,
        files=tuple(plan.contents),
        job_records=plan.job_records,
        job_files=tuple(plan.job_contents),
        unplaced=tuple(job_id for job_id in unplaced if job_id not in mig),
        mig=tuple(mig),
        unknown_nodes=tuple(sorted(host_of.unknown)),
        refused=tuple(
            dict.fromkeys(item.job_id for item in refused if item.job_id not in imported)
        ),
        source=described,
    )
