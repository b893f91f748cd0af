"""The raw sample files as an ingest finds them: listed (`scan.py`), judged against
`loaded_files`, the record of those loaded (`loaded.py`), whether they still arrive
(`arrival.py`), and the ones set aside, recorded and moved to quarantine/ (`quarantine.py`).
The loading itself is `ingest`'s."""

from gpufleet.warehouse.raw.arrival import InputCheck, check_input
from gpufleet.warehouse.raw.loaded import Listing, check_listing, record_loaded, split_new_files
from gpufleet.warehouse.raw.quarantine import (
    QuarantinedFile,
    QuarantineWarning,
    move_to_quarantine,
    record_quarantined,
    record_set_aside,
)
from gpufleet.warehouse.raw.scan import find_sample_files, list_sample_files

__all__ = [
    "InputCheck",
    "Listing",
    "QuarantineWarning",
    "QuarantinedFile",
    "check_input",
    "check_listing",
    "find_sample_files",
    "list_sample_files",
    "move_to_quarantine",
    "record_loaded",
    "record_quarantined",
    "record_set_aside",
    "split_new_files",
]
