"""`gpufleet ingest`'s steps (the package's docstring) in one write transaction, and after
its publish the bad files moved to quarantine/; `docs/warehouse.md` walks through them."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TypedDict, Unpack

from gpufleet.config import Config
from gpufleet.integrations.mirror import mirror_raw_location
from gpufleet.warehouse.base.sample_files import SampleFile, Unreadable
from gpufleet.warehouse.build.models import apply_table_docs
from gpufleet.warehouse.ingest.fanned import LoadFanOut
from gpufleet.warehouse.ingest.pipeline import load_samples
from gpufleet.warehouse.ingest.result import IngestResult, Log
from gpufleet.warehouse.ingest.values import time_limits
from gpufleet.warehouse.lake.compact import compact_completed_days
from gpufleet.warehouse.lake.compact_ahead import CompactAhead
from gpufleet.warehouse.lake.content import replaced_in
from gpufleet.warehouse.lake.fanout import CompactFanOut
from gpufleet.warehouse.publish.slots import DEFAULT_LOCK_TIMEOUT_S, write_transaction
from gpufleet.warehouse.raw.arrival import check_input
from gpufleet.warehouse.raw.loaded import check_listing
from gpufleet.warehouse.raw.quarantine import move_to_quarantine, record_set_aside
from gpufleet.warehouse.raw.scan import list_sample_files
from gpufleet.warehouse.refs.listing import read_references
from gpufleet.warehouse.refs.read import stray_host_teams
from gpufleet.warehouse.refs.records import HOSTS_FILE, References, SetAside
from gpufleet.warehouse.refs.tables import published_allocation_files, replace_references


class LoadOptions(TypedDict, total=False):
    """The keywords of `load_warehouse` that `ingest` and `load_new_files` pass on."""

    progress: Log | None
    lock_timeout_s: float
    compact: bool
    today: dt.date | None
    compact_fan_out: CompactFanOut | None
    load_fan_out: LoadFanOut | None


def ingest(
    config: Config, *, warn: Log | None = None, **options: Unpack[LoadOptions]
) -> IngestResult:
    """The whole ingest without Prefect: validate refs, load, compact, publish, quarantine
    (`warn`: where each quarantined file is reported; default: a log line and a
    QuarantineWarning)."""
    return quarantine_after_publish(config, load_new_files(config, **options), warn=warn)


def load_new_files(config: Config, **options: Unpack[LoadOptions]) -> IngestResult:
    """Validate the reference files, list the raw files and load the new ones (published
    with the warehouse transaction, or joining the caller's); moves nothing to quarantine/:
    `quarantine_after_publish` does, once the caller's transaction is published."""
    started = time.perf_counter()
    # raw_location = "s3://..." (a site's too): new files into raw/, or left for the workers
    defer = options.get("load_fan_out") is not None  # (what compaction replaced: not copied)
    mirror_raw_location(config, defer=defer, replaced=replaced_in)
    references = read_references(config, known=published_allocation_files(config))
    listing = list_sample_files(config)
    listed = time.perf_counter()
    result = load_warehouse(
        config, references, listing.files, unreadable=listing.unreadable, **options
    )
    return replace(
        result,
        step_seconds=(("reference files and listing", listed - started), *result.step_seconds),
    )


def quarantine_after_publish(
    config: Config, result: IngestResult, *, warn: Log | None = None
) -> IngestResult:
    """Move the files `result` quarantined to quarantine/ and report each (after the
    publish that recorded them, so that a failed transaction moves nothing)."""
    moving = time.perf_counter()
    move_to_quarantine(config, result.quarantined, warn=warn)
    return replace(
        result,
        step_seconds=(*result.step_seconds, ("quarantine", time.perf_counter() - moving)),
    )


def load_warehouse(
    config: Config,
    references: References,
    files: Sequence[SampleFile],
    *,
    progress: Log | None = None,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    compact: bool = True,
    today: dt.date | None = None,
    compact_fan_out: CompactFanOut | None = None,
    load_fan_out: LoadFanOut | None = None,
    unreadable: Sequence[Unreadable] = (),
) -> IngestResult:
    """One write transaction: new samples, loaded/quarantined files, reference tables, and
    the compaction of host-days before `today` (UTC, default the real today; a later one is
    also the earliest "now" of the times a sample may have), on `compact_fan_out`'s workers
    when given, the batches of whole host-days on `load_fan_out`'s (`fanned.py`).
    `unreadable`: what the listing of `files` could not read."""
    started = time.perf_counter()
    with write_transaction(config, lock_timeout_s=lock_timeout_s) as con:
        opened = time.perf_counter()
        # Listed before the lock was taken: judged again now.
        listing = check_listing(con, config, files, unreadable=unreadable)
        checked = time.perf_counter()
        now = dt.datetime.now(dt.UTC)
        day = today or now.date()
        midnight = dt.datetime.combine(day, dt.time(), dt.UTC)
        limits = time_limits(config.ingest, max(now, midnight))
        ahead = CompactAhead.plan(config, listing.files, day) if compact else None
        try:
            result = load_samples(
                con,
                config,
                listing.unsettled,
                progress=progress,
                ahead=ahead,
                fan_out=load_fan_out,
                limits=limits,
            )
            # Replaced by their host-day's compacted file since, and back with other content.
            result = replace(result, quarantined=(*listing.changed, *result.quarantined))
            loaded = time.perf_counter()
            set_aside: list[SetAside] = list(references.set_aside)
            references_changed = replace_references(con, references, set_aside=set_aside)
            quarantined = (
                *result.quarantined,
                *record_set_aside(con, config, set_aside, dt.datetime.now(dt.UTC)),
            )
            allocations = con.execute("select count(*) from allocations").fetchone()
            slurm_jobs = con.execute("select count(*) from slurm_jobs").fetchone()
            allocation_teams = con.execute(
                "select distinct team from allocations where team is not null"
            ).fetchall()
            stray = stray_host_teams(
                references, (team for (team,) in allocation_teams), str(config.ref_dir / HOSTS_FILE)
            )
            compacting = time.perf_counter()
            compaction = (
                compact_completed_days(
                    con,
                    config,
                    exclude=[item.path for item in result.quarantined],
                    progress=progress,
                    today=day,
                    ahead=ahead,
                    fan_out=compact_fan_out,
                )
                if compact
                else None
            )
        finally:
            if ahead is not None:
                ahead.close()
        if compaction is not None and compaction.from_load:
            apply_table_docs(con, "samples")  # the view names the lake's new files
        # Judged on what this ingest recorded; the caller fails on a problem once published.
        arrival = check_input(con, config, listing.files, unreadable=listing.unreadable)
        compacted = time.perf_counter()
    steps = (
        ("opening the warehouse", opened - started),
        *(
            (name, seconds + (checked - opened) * (name == "new files"))
            for name, seconds in result.step_seconds
        ),
        ("reference tables", compacting - loaded),
        ("compaction", compacted - compacting),
        ("publish", time.perf_counter() - compacted),
    )
    return replace(
        result,
        quarantined=quarantined,
        users=len(references.users),
        host_rules=len(references.hosts),
        price_rules=len(references.prices),
        allocations=int(allocations[0]) if allocations else 0,
        slurm_jobs=int(slurm_jobs[0]) if slurm_jobs else 0,
        references_changed=references_changed,
        warnings=(*listing.warnings, *stray),
        compaction=compaction,
        input_problem=arrival.problem,
        input_note=arrival.note,
        expired_files=listing.expired,
        expired_before=listing.expired_before,
        listed_again=listing.listed_again,
        step_seconds=steps,
        alongside_seconds=(
            *result.alongside_seconds,
            *((("compacted files written", ahead.write_seconds),) if ahead is not None else ()),
        ),
    )
