"""The configuration's values: `Config` and a dataclass per section, with their defaults.

This module imports no other of the package: the loaders (`load.py`) and the checks
(`checks.py`, `sources.py`) import it. The keys, their defaults and their checks:
docs/reference.md#configuration.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

ENV_SMTP_PASSWORD = "GPUFLEET_SMTP_PASSWORD"

# Contract column (or helper value) -> the Prometheus series names that give it, first found
# wins: dcgm-exporter's names. `[prometheus.series]` overrides any of them for a site that
# relabels (docs/kubernetes.md#configuration).
DEFAULT_PROMETHEUS_SERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpu_util_pct", ("DCGM_FI_DEV_GPU_UTIL",)),
    ("engine_active_ratio", ("DCGM_FI_PROF_GR_ENGINE_ACTIVE",)),
    ("mem_util_pct", ("DCGM_FI_DEV_MEM_COPY_UTIL",)),
    ("mem_used_bytes", ("DCGM_FI_DEV_FB_USED",)),
    ("mem_free_bytes", ("DCGM_FI_DEV_FB_FREE",)),
    ("mem_reserved_bytes", ("DCGM_FI_DEV_FB_RESERVED",)),
    ("power_w", ("DCGM_FI_DEV_POWER_USAGE",)),
    ("power_limit_w", ("DCGM_FI_DEV_POWER_MGMT_LIMIT",)),
    ("energy_mj", ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",)),
    ("temp_gpu_c", ("DCGM_FI_DEV_GPU_TEMP",)),
    ("temp_mem_c", ("DCGM_FI_DEV_MEMORY_TEMP",)),
    ("sm_clock_mhz", ("DCGM_FI_DEV_SM_CLOCK",)),
    ("mem_clock_mhz", ("DCGM_FI_DEV_MEM_CLOCK",)),
    (
        "clock_event_mask",
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    ),
    ("thermal_violation_ns", ("DCGM_FI_DEV_THERMAL_VIOLATION",)),
    ("power_violation_ns", ("DCGM_FI_DEV_POWER_VIOLATION",)),
    ("sm_active_pct", ("DCGM_FI_PROF_SM_ACTIVE",)),
    ("sm_occupancy_pct", ("DCGM_FI_PROF_SM_OCCUPANCY",)),
    ("tensor_active_pct", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",)),
    ("dram_active_pct", ("DCGM_FI_PROF_DRAM_ACTIVE",)),
    ("pcie_rx_bytes_s", ("DCGM_FI_PROF_PCIE_RX_BYTES",)),
    ("pcie_tx_bytes_s", ("DCGM_FI_PROF_PCIE_TX_BYTES",)),
    ("nvlink_rx_bytes_s", ("DCGM_FI_PROF_NVLINK_RX_BYTES",)),
    ("nvlink_tx_bytes_s", ("DCGM_FI_PROF_NVLINK_TX_BYTES",)),
    ("xid_errors", ("DCGM_FI_DEV_XID_ERRORS",)),
    ("ecc_uncorrected_volatile", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",)),
    ("ecc_corrected_volatile", ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",)),
    ("remapped_rows_pending", ("DCGM_FI_DEV_ROW_REMAP_PENDING",)),
    ("remapped_rows_failure", ("DCGM_FI_DEV_ROW_REMAP_FAILURE",)),
    ("retired_pages_pending", ("DCGM_FI_DEV_RETIRED_PENDING",)),
    ("pcie_replay_count", ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",)),
)

# `[compute] dask`: "local:N" (a LocalCluster of N workers) or "tcp://host:port" (a scheduler).
LOCAL_WORKERS = re.compile(r"^local:([1-9][0-9]{0,3})$")
SCHEDULER_ADDRESS = re.compile(r"^tcp://[^/\s:]+:[0-9]{1,5}$")


@dataclass(frozen=True, kw_only=True)
class IdleConfig:
    threshold_pct: float = 5.0
    min_minutes: float = 30.0


@dataclass(frozen=True, kw_only=True)
class SeriesConfig:
    max_gap_factor: float = 2.5


@dataclass(frozen=True, kw_only=True)
class ReportConfig:
    recipients: tuple[str, ...] = ()
    sender: str = "gpufleet@localhost"
    # where <data_dir>/reports/ is served over http(s): the emails link the week's page there
    page_url: str = ""


@dataclass(frozen=True, kw_only=True)
class NotifyConfig:
    """Idle notices (`gpufleet notify idle`)."""

    min_waste_gpu_hours: float = 2.0  # a user is mailed when the day's new waste reaches this
    opt_out: tuple[str, ...] = ()  # user names or addresses never mailed


@dataclass(frozen=True, kw_only=True)
class SmtpConfig:
    host: str = "localhost"
    port: int = 25
    starttls: bool = False
    username: str = ""

    @property
    def password(self) -> str:
        """The SMTP password, read from the environment only and never stored or logged."""
        return os.environ.get(ENV_SMTP_PASSWORD, "")


@dataclass(frozen=True, kw_only=True)
class IngestConfig:
    """When `gpufleet ingest` and `gpufleet status` call the input stale, and the times a
    sample may have (docs/reference.md#valid-values)."""

    stale_after_minutes: int = 60  # no new sample file for this long is an error; 0: off
    earliest: dt.date = dt.date(2015, 1, 1)  # a sample before this day is quarantined
    # A sample more than this after the ingest's time is in the future: quarantined.
    max_clock_skew_minutes: int = 1440


@dataclass(frozen=True, kw_only=True)
class PrometheusConfig:
    """`gpufleet import prometheus`: where, how finely, and the names a site's series carry."""

    url: str = ""  # the Prometheus server; `--url` wins
    step_seconds: int = 60  # a row's interval_s: each row is the mean of the scrapes in its step
    window_minutes: int = 60  # one query per series and batch of hosts covers at most this much
    delay_seconds: int = 120  # steps younger than this wait for the next run
    timeout_seconds: float = 30.0  # per HTTP request
    host_label: str = "Hostname"
    uuid_label: str = "UUID"
    gpu_label: str = "gpu"
    model_label: str = "modelName"
    mig_instance_label: str = "GPU_I_ID"  # on a MIG device's series: its GPU instance
    mig_profile_label: str = "GPU_I_PROFILE"  # and its profile, e.g. 1g.10gb
    cluster: str = ""  # the site of its samples (`cluster` column); empty: the top-level cluster
    series: tuple[tuple[str, tuple[str, ...]], ...] = DEFAULT_PROMETHEUS_SERIES

    def series_names(self, column: str) -> tuple[str, ...]:
        """The series names that give `column`, first found wins."""
        return dict(self.series)[column]


@dataclass(frozen=True, kw_only=True)
class KubernetesConfig:
    """Pods as allocations: the labels dcgm-exporter puts on a GPU that a pod holds."""

    team_from: str = "namespace"  # "namespace", or the name of a label that holds the team
    namespace_label: str = "namespace"  # "exported_namespace" behind a ServiceMonitor
    pod_label: str = "pod"
    user_label: str = ""  # a label that names the pod's user; empty: users stay null


@dataclass(frozen=True, kw_only=True)
class SlurmConfig:
    """`gpufleet import slurm`: where a job's team comes from, and whether `gpufleet serve`
    imports every 15 minutes."""

    team_from: str = "account"  # "account" (ref/accounts.csv, else the account) or "user"
    enabled: bool = False  # `gpufleet serve` runs the import before each ingest


@dataclass(frozen=True, kw_only=True)
class S3Config:
    """The S3-compatible store of `raw_location` and `collect --upload` (credentials: the
    standard AWS environment variables or profile, never this file)."""

    endpoint_url: str = ""  # e.g. http://minio.example:9000; empty: AWS itself
    region: str = ""  # empty: the AWS configuration's, else us-east-1


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    """`[retention]`: how long raw samples and rendered weekly reports are kept (0: always);
    the marts keep every day (docs/operations.md#retention)."""

    samples_days: int = 0  # samples of local days before today minus this many are deleted
    reports_weeks: int = 0  # weekly report folders of ISO weeks this many before this one go


@dataclass(frozen=True, kw_only=True)
class GridConfig:
    """Grams of CO2 per kWh where ref/grid.csv has no dated row (gpufleet.carbon)."""

    gco2_per_kwh: float | None = None  # top-level grid_gco2_per_kwh: every site's; None: unknown
    sites: tuple[tuple[str, float], ...] = ()  # [clusters.<site>] grid_gco2_per_kwh


@dataclass(frozen=True, kw_only=True)
class ComputeConfig:
    """`[compute]`: where a full build's per-GPU-range work, and an ingest's compaction of
    host-days from their files, run (docs/dask.md). `dask = ""` runs it in the pipeline's
    own DuckDB (the default); `local:N` on a Dask `LocalCluster` of N worker processes on
    this machine; `tcp://host:port` on the Dask cluster whose scheduler listens there."""

    dask: str = ""  # empty: embedded; "local:N"; "tcp://host:port"

    @property
    def local_workers(self) -> int | None:
        """N of `local:N`; None for a scheduler's address or the embedded build."""
        match = LOCAL_WORKERS.match(self.dask)
        return int(match.group(1)) if match else None

    @property
    def scheduler(self) -> str | None:
        """The scheduler's address of `tcp://host:port`, else None."""
        return self.dask if SCHEDULER_ADDRESS.match(self.dask) else None


@dataclass(frozen=True, kw_only=True)
class Config:
    data_dir: Path = Path("data")
    # Where the raw files come from: empty, <data_dir>/raw; or an s3://bucket/prefix that
    # each ingest copies into <data_dir>/raw first (docs/ingest.md#reading-from-object-storage).
    raw_location: str = ""
    s3: S3Config = field(default_factory=S3Config)
    timezone: str = "UTC"
    cluster: str = ""  # the site collect and import prometheus record; empty: none
    sites: tuple[tuple[str, str], ...] = ()  # [clusters.<site>] timezone: (site, zone)
    # [clusters.<site>] raw_location: (site, s3://bucket/prefix), every file of it the site's
    site_locations: tuple[tuple[str, str], ...] = ()
    slurm_clusters: tuple[tuple[str, str], ...] = ()  # [clusters.<site>] slurm_cluster
    idle: IdleConfig = field(default_factory=IdleConfig)
    series: SeriesConfig = field(default_factory=SeriesConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    smtp: SmtpConfig = field(default_factory=SmtpConfig)
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    grid: GridConfig = field(default_factory=GridConfig)  # grid_gco2_per_kwh: gpufleet.carbon
    source: Path | None = None  # the TOML file this came from, if any

    def site_timezone(self, site: str | None) -> str:
        """The time zone of a site's local days: its [clusters.<site>] timezone, else the
        configured one (no site, or one not listed): docs/sites.md."""
        return dict(self.sites).get(site, self.timezone) if site else self.timezone

    # The data directory's layout (docs/reference.md#data-directory).
    @property
    def samples_dir(self) -> Path:
        return self.data_dir / "raw" / "samples"

    @property
    def allocations_dir(self) -> Path:
        return self.data_dir / "raw" / "allocations"

    @property
    def jobs_dir(self) -> Path:
        return self.data_dir / "raw" / "jobs"

    @property
    def ref_dir(self) -> Path:
        return self.data_dir / "ref"

    @property
    def warehouse_path(self) -> Path:
        return self.data_dir / "warehouse.duckdb"

    @property
    def reports_dir(self) -> Path:
        return self.data_dir / "reports"

    @property
    def quarantine_dir(self) -> Path:
        return self.data_dir / "quarantine"

    @property
    def notices_dir(self) -> Path:
        return self.data_dir / "notices"
