"""`gpufleet ingest`: new raw sample files found, read, checked and loaded batch by batch,
the reference tables replaced, completed host-days compacted, bad files quarantined."""

from gpufleet.warehouse.base.sample_files import SampleFile, SampleListing
from gpufleet.warehouse.ingest.cut import plan_batches
from gpufleet.warehouse.ingest.result import IngestResult, Log
from gpufleet.warehouse.ingest.run import (
    ingest,
    load_new_files,
    load_warehouse,
    quarantine_after_publish,
)
from gpufleet.warehouse.raw.quarantine import QuarantinedFile, QuarantineWarning, move_to_quarantine
from gpufleet.warehouse.raw.scan import find_sample_files, list_sample_files

__all__ = [
    "IngestResult",
    "Log",
    "QuarantineWarning",
    "QuarantinedFile",
    "SampleFile",
    "SampleListing",
    "find_sample_files",
    "ingest",
    "list_sample_files",
    "load_new_files",
    "load_warehouse",
    "move_to_quarantine",
    "plan_batches",
    "quarantine_after_publish",
]
