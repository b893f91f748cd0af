"""The sample file schema: one row per GPU per collector tick (columns: docs/reference.md)."""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "1"
COLLECTOR_VERSION = "0.1.0"

PROCESS_TYPE = pa.struct(
    [
        pa.field("pid", pa.uint32()),
        pa.field("user", pa.string()),
        pa.field("used_mem_bytes", pa.int64()),
        pa.field("job_id", pa.string()),
    ]
)

# The columns of contract v1.1 (the first release and alloc_job_id, alloc_user, cluster).
V1_1_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("interval_s", pa.float32(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("gpu_index", pa.uint16(), nullable=False),
        pa.field("gpu_uuid", pa.string(), nullable=False),
        pa.field("gpu_name", pa.string()),
        pa.field("status", pa.string(), nullable=False),
        pa.field("gpu_util_pct", pa.float32()),
        pa.field("mem_util_pct", pa.float32()),
        pa.field("mem_used_bytes", pa.int64()),
        pa.field("mem_total_bytes", pa.int64()),
        pa.field("power_w", pa.float32()),
        pa.field("power_limit_w", pa.float32()),
        pa.field("energy_mj", pa.int64()),
        pa.field("temp_gpu_c", pa.int16()),
        pa.field("temp_mem_c", pa.int16()),
        pa.field("sm_clock_mhz", pa.int32()),
        pa.field("sm_clock_max_mhz", pa.int32()),
        pa.field("mem_clock_mhz", pa.int32()),
        pa.field("clock_event_mask", pa.uint64()),
        pa.field("thermal_violation_ns", pa.int64()),
        pa.field("power_violation_ns", pa.int64()),
        pa.field("mig_enabled", pa.bool_()),
        pa.field("processes", pa.list_(PROCESS_TYPE)),
        pa.field("alloc_job_id", pa.string()),
        pa.field("alloc_user", pa.string()),
        pa.field("cluster", pa.string()),
    ]
)

# Columns added in contract v1.2 (activity, health, MIG devices), all nullable, after the
# v1.1 columns above: a file without them (an older collector's, another writer's) reads
# them as null, and a reader of an older release ignores them, as the contract lets a
# newer writer's extra columns be.
V1_2_FIELDS = (
    # Means over the row's interval from NVML GPM (Hopper and newer), 0-100 and bytes/s.
    pa.field("sm_active_pct", pa.float32()),
    pa.field("sm_occupancy_pct", pa.float32()),
    pa.field("tensor_active_pct", pa.float32()),
    pa.field("dram_active_pct", pa.float32()),
    pa.field("pcie_rx_bytes_s", pa.float64()),
    pa.field("pcie_tx_bytes_s", pa.float64()),
    pa.field("nvlink_rx_bytes_s", pa.float64()),
    pa.field("nvlink_tx_bytes_s", pa.float64()),
    # Health of the physical GPU (null on a MIG device's row).
    pa.field("xid_errors", pa.list_(pa.int32())),
    pa.field("ecc_uncorrected_volatile", pa.int64()),
    pa.field("ecc_corrected_volatile", pa.int64()),
    pa.field("remapped_rows_pending", pa.bool_()),
    pa.field("remapped_rows_failure", pa.bool_()),
    pa.field("retired_pages_pending", pa.bool_()),
    pa.field("pcie_replay_count", pa.int64()),
    # A MIG device's row: its physical GPU, its profile and its share of the GPU.
    pa.field("parent_gpu_uuid", pa.string()),
    pa.field("mig_profile", pa.string()),
    pa.field("mig_slice_fraction", pa.float32()),
)

# Every sample column, in contract order: what the collector writes, the warehouse loads
# (its table's columns and types, `warehouse/base/raw_tables.py`) and the simulator and
# importers write. A new column is a field here, appended (nullable).
SAMPLE_SCHEMA = pa.schema([*V1_1_SCHEMA, *V1_2_FIELDS])
# The columns a row must not hold NULL in (the non-nullable fields).
REQUIRED_COLUMNS = tuple(field.name for field in SAMPLE_SCHEMA if not field.nullable)
# The collector's schema: the contract's (the name kept for the collector's modules).
COLLECTOR_SCHEMA = SAMPLE_SCHEMA

STATUS_OK = "ok"
STATUS_LOST = "lost"
STATUS_NO_PERMISSION = "no_permission"

# Clock-event (throttle) reason bits, NVML. Thermal = SW | HW thermal slowdown.
THERMAL_MASK = 0x60


def file_metadata() -> dict[bytes, bytes]:
    """Key-value metadata every sample file carries."""
    return {
        b"gpufleet.schema_version": SCHEMA_VERSION.encode(),
        b"gpufleet.collector_version": COLLECTOR_VERSION.encode(),
    }


def schema_with_metadata() -> pa.Schema:
    return SAMPLE_SCHEMA.with_metadata(file_metadata())


def collector_schema_with_metadata() -> pa.Schema:
    """The schema of the collector's own files (`SAMPLE_SCHEMA`'s)."""
    return COLLECTOR_SCHEMA.with_metadata(file_metadata())


def partition_dir(samples_root: str, date_iso: str, host: str) -> str:
    """`raw/samples/date=YYYY-MM-DD/host=<host>` below `samples_root` (`host` a path
    component already: `host_folder`)."""
    return f"{samples_root}/date={date_iso}/host={host}"


def host_folder(safe_host: str, cluster: str | None) -> str:
    """The `host=` folder's name of a host (already a path component) of a site: the host
    alone without a site, else `<host>@<cluster>`, so that two sites' hosts of the same
    name never share a folder (a path-safe host name never holds '@')."""
    return f"{safe_host}@{cluster}" if cluster else safe_host


def folder_host(name: str) -> tuple[str, str | None]:
    """(host, cluster) of a `host=` folder's name (without `host=`): `host_folder` undone."""
    host, at, cluster = name.rpartition("@")
    return (host, cluster) if at and host and cluster else (name, None)
