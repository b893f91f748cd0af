"""The scheduled cycle: ingest, then build when anything was loaded, published once."""

from __future__ import annotations

import datetime as dt

from gpufleet.config import Config
from gpufleet.warehouse.build import BuildResult, build
from gpufleet.warehouse.ingest import IngestResult, ingest
from gpufleet.warehouse.slots import write_transaction


def ingest_then_build(
    config: Config, *, today: dt.date | None = None
) -> tuple[IngestResult, BuildResult | None]:
    """Ingest, then build when anything was loaded, in one published warehouse transaction
    (`today`: the UTC day whose files are not compacted yet; default: the real today)."""
    with write_transaction(config):
        ingested = ingest(config, today=today)
        built = build(config) if ingested.loaded_anything else None
    return ingested, built
