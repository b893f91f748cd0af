"""What every stage of the warehouse shares, below all of them: the raw tables' DDL (the
boundary between ingest and the models), the comments on tables made outside the models,
and the records of a raw sample file."""

from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.base.raw_tables import (
    QUOTED_SAMPLE_COLUMNS,
    REQUIRED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    ensure_raw_tables,
    literal_path,
)
from gpufleet.warehouse.base.sample_files import LoadedFile, SampleFile
from gpufleet.warehouse.base.table_docs import TableDoc, document

__all__ = [
    "QUOTED_SAMPLE_COLUMNS",
    "REQUIRED_SAMPLE_COLUMNS",
    "SAMPLE_COLUMNS",
    "LoadedFile",
    "SampleFile",
    "TableDoc",
    "document",
    "ensure_raw_tables",
    "has_table",
    "literal_path",
]
