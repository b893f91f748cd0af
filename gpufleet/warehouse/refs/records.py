"""The reference files' names and columns, and the records their rows become.

`References` holds everything in ref/, raw/allocations/ and raw/jobs/, validated (`read.py`
reads it; `tables.py` writes it into the warehouse).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

USERS_FILE = "users.csv"
TEAMS_FILE = "teams.csv"
HOSTS_FILE = "hosts.csv"
PRICES_FILE = "prices.csv"

USERS_COLUMNS = ("user", "team")
USERS_OPTIONAL = ("email", "valid_from")
TEAMS_COLUMNS = ("team", "lead_email")
TEAMS_OPTIONAL = ("cc",)
HOSTS_COLUMNS = ("host_glob", "team")
HOSTS_OPTIONAL = ("valid_from", "cluster")
PRICES_COLUMNS = ("gpu_glob", "usd_per_gpu_hour")
PRICES_OPTIONAL = ("valid_from", "cluster")
ALLOCATIONS_COLUMNS = ("job_id", "user", "team", "host", "gpu_index", "start_ts", "end_ts")
# the job's site (Slurm cluster): its row covers only that site's host of the name; the GPU
# or MIG device it holds by UUID (then its gpu_index may be empty)
ALLOCATIONS_OPTIONAL = ("cluster", "gpu_uuid")
# raw/jobs/*.csv: `gpufleet import slurm` writes every column; a site's own export needs
# only a job's id and start.
JOBS_COLUMNS = ("job_id", "start_ts")
JOBS_OPTIONAL = (
    "job_id_raw",
    "cluster",
    "user",
    "account",
    "partition",
    "state",
    "team",
    "gpus",
    "hosts",
    "end_ts",
    "seen_ts",
)


class UserTeam(NamedTuple):
    user: str
    team: str
    email: str | None = None  # users.csv's optional `email`: where idle notices go
    valid_from: dt.date | None = None  # the local day the row applies from; None: all time


class TeamContact(NamedTuple):
    team: str
    lead_email: str  # who receives the team's mail
    cc: tuple[str, ...] = ()  # copied on it


class HostRule(NamedTuple):
    rule_order: int  # 1-based row order in hosts.csv: first match wins
    host_glob: str
    team: str
    line: int = 0  # the line of hosts.csv it is on (not stored)
    valid_from: dt.date | None = None  # the local day the row applies from; None: all time
    cluster: str | None = None  # the site whose hosts it applies to (and their site); None: any


class PriceRule(NamedTuple):
    rule_order: int  # 1-based row order in prices.csv: first match wins
    gpu_glob: str
    usd_per_gpu_hour: float
    valid_from: dt.date | None = None  # the local day the row applies from; None: all time
    cluster: str | None = None  # the site it prices (before rows of every site); None: any


class Allocation(NamedTuple):
    job_id: str | None
    user: str | None
    team: str | None  # None: look the user up in users.csv
    host: str
    gpu_index: int | None  # None: the row names its GPU by `gpu_uuid` alone
    start_ts: dt.datetime
    end_ts: dt.datetime | None  # None: still running
    source_file: str  # relative to the data directory
    # the site (Slurm cluster) whose host of that name it covers; None: every site's
    cluster: str | None = None
    # the MIG device or GPU it holds, by UUID: it covers that device's samples (a GPU's: its
    # MIG devices' too), not those of gpu_index; None: the GPU of gpu_index
    gpu_uuid: str | None = None


class SlurmJobRecord(NamedTuple):
    """One row of raw/jobs/*.csv: a Slurm job that held GPUs (a row of `slurm_jobs`)."""

    job_id: str  # as Slurm prints it (4242_7)
    job_id_raw: str | None  # its own SLURM_JOB_ID (4250), as samples may name it
    cluster: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str | None
    team: str | None  # None: look the user up in users.csv
    gpus: int | None
    hosts: tuple[str, ...] | None  # collector host names; None: not given
    start_ts: dt.datetime
    end_ts: dt.datetime | None  # None: still running
    seen_ts: dt.datetime | None  # when the import last saw it running; None: not given
    source_file: str  # relative to the data directory


class SetAside(NamedTuple):
    """A line of an allocation or job file that is not loaded (the file's other lines are),
    or a whole file no line of which can be read (a bad header, not UTF-8)."""

    source: str  # the file, relative to the data directory
    reason: str  # "line 3: 'end_ts' is before 'start_ts'", or the whole file's problem
    whole_file: bool = False


class AllocationFile(NamedTuple):
    """One raw/allocations/*.csv or raw/jobs/*.csv file as listed, before its rows were
    read."""

    source: str  # relative to the data directory, as in allocations.source_file
    path: Path
    size_bytes: int
    mtime_ns: int

    @property
    def signature(self) -> tuple[int, int]:
        return (self.size_bytes, self.mtime_ns)


@dataclass(frozen=True, kw_only=True)
class References:
    """Everything in ref/, raw/allocations/ and raw/jobs/, validated; the rows of the
    allocation and job files in `unread` were not read (the warehouse has them:
    `read_references`' `known`), and the lines of those read that are not loaded are in
    `set_aside`."""

    users: tuple[UserTeam, ...] = ()
    teams: tuple[TeamContact, ...] = ()
    hosts: tuple[HostRule, ...] = ()
    prices: tuple[PriceRule, ...] = ()
    allocations: tuple[Allocation, ...] = ()
    allocation_files: tuple[AllocationFile, ...] = ()
    jobs: tuple[SlurmJobRecord, ...] = ()
    job_files: tuple[AllocationFile, ...] = ()
    unread: frozenset[str] = frozenset()
    set_aside: tuple[SetAside, ...] = ()
