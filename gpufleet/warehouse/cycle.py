"""The scheduled cycle: ingest, then build when anything was loaded, published once."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from gpufleet.config import Config
from gpufleet.warehouse.build.fanout import FanOut
from gpufleet.warehouse.build.retention import after_publish
from gpufleet.warehouse.build.run import BuildResult, build
from gpufleet.warehouse.ingest.fanned import LoadFanOut
from gpufleet.warehouse.ingest.result import IngestResult, Log
from gpufleet.warehouse.ingest.run import load_new_files, quarantine_after_publish
from gpufleet.warehouse.lake.fanout import CompactFanOut
from gpufleet.warehouse.publish.slots import write_transaction


def ingest_then_build(
    config: Config,
    *,
    today: dt.date | None = None,
    progress: Log | None = None,
    warn: Log | None = None,
    fan_out: FanOut | None = None,
    compact_fan_out: CompactFanOut | None = None,
    load_fan_out: LoadFanOut | None = None,
) -> tuple[IngestResult, BuildResult | None]:
    """Ingest, then build when anything was loaded, in one published warehouse transaction;
    quarantined files are moved once it is published (`today`: the UTC day whose files are
    not compacted yet, default the real today; `progress` and `warn` as for `ingest`; a full
    build's per-series models on `fan_out`'s workers when given: `build/fanout.py`, and the
    host-days compacted from their files on `compact_fan_out`'s: `lake/fanout.py`, and a
    backfill's whole host-days read on `load_fan_out`'s: `ingest/fanned.py`)."""
    with write_transaction(config):
        loaded = load_new_files(
            config,
            today=today,
            progress=progress,
            compact_fan_out=compact_fan_out,
            load_fan_out=load_fan_out,
        )
        built = build(config, fan_out=fan_out) if loaded.loaded_anything else None
    if built is not None:
        # The build inside joined this transaction: what it expired goes once published.
        built = replace(built, expired=built.expired + after_publish(config))
    return quarantine_after_publish(config, loaded, warn=warn), built
