"""The reference files (ref/users.csv, teams.csv, hosts.csv, prices.csv) and the
allocations (raw/allocations/*.csv): read and validated whole (`read.py`), then written
into their tables (`tables.py`)."""

from gpufleet.warehouse.refs.listing import read_references
from gpufleet.warehouse.refs.records import References
from gpufleet.warehouse.refs.tables import published_allocation_files, replace_references

__all__ = [
    "References",
    "published_allocation_files",
    "read_references",
    "replace_references",
]
