"""Listing the reference files, the allocation files and the job files, and reading what
changed (`read_references`): an allocation or job file is read again only when its size or
modification time differs from those the warehouse last read it at, and its bad lines are
set aside (`References.set_aside`), not failed on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.refs.jobs import read_jobs
from gpufleet.warehouse.refs.read import (
    read_allocations,
    read_hosts,
    read_prices,
    read_teams,
    read_users,
)
from gpufleet.warehouse.refs.records import (
    HOSTS_FILE,
    PRICES_FILE,
    TEAMS_FILE,
    USERS_FILE,
    AllocationFile,
    References,
    SetAside,
)


def _visible(path: Path) -> bool:
    return not path.name.startswith((".", "_"))


def listed_files(folder: Path) -> list[Path]:
    """The visible *.csv files of `folder` (an allocation or a job folder), in name order."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.csv") if _visible(p) and p.is_file())


class _Listed(NamedTuple):
    rows: list[Any]  # the rows of the files read
    files: tuple[AllocationFile, ...]  # every file listed
    unread: set[str]  # the files not read (known at the same size and mtime)
    set_aside: list[SetAside]  # the lines of the files read that are not loaded


class ReadListed(Protocol):
    """`read_allocations` or `read_jobs`: one file's rows, its bad lines set aside."""

    def __call__(
        self,
        path: Path,
        source_file: str,
        display: str | None = None,
        *,
        set_aside: list[SetAside] | None = None,
    ) -> Sequence[Any]: ...


def _read_listed(
    config: Config,
    folder: Path,
    read: ReadListed,
    known: Mapping[str, tuple[int, int]],
) -> _Listed:
    """The visible *.csv files of `folder`, each read with `read` unless `known` has it at
    its current (size, mtime_ns)."""
    paths = listed_files(folder)
    listed = _Listed([], (), set(), [])
    files: list[AllocationFile] = []
    for path in paths:
        try:
            stat = path.stat()  # before the read: a file changed during it is read again
        except OSError as exc:
            raise GpufleetError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        file = AllocationFile(
            path.relative_to(config.data_dir).as_posix(), path, stat.st_size, stat.st_mtime_ns
        )
        files.append(file)
        if known.get(file.source) == file.signature:
            listed.unread.add(file.source)
        else:
            listed.rows.extend(read(path, file.source, set_aside=listed.set_aside))
    return listed._replace(files=tuple(files))


def read_references(
    config: Config, *, known: Mapping[str, tuple[int, int]] | None = None
) -> References:
    """Read and validate every reference file; missing files give empty tables. An
    allocation or job file whose (size, mtime_ns) is `known[its source]` is listed, not
    read."""
    known = known or {}
    ref_dir = config.ref_dir
    users_path, teams_path, hosts_path, prices_path = (
        ref_dir / USERS_FILE,
        ref_dir / TEAMS_FILE,
        ref_dir / HOSTS_FILE,
        ref_dir / PRICES_FILE,
    )
    allocations = _read_listed(config, config.allocations_dir, read_allocations, known)
    jobs = _read_listed(config, config.jobs_dir, read_jobs, known)
    return References(
        users=read_users(users_path) if users_path.is_file() else (),
        teams=read_teams(teams_path) if teams_path.is_file() else (),
        hosts=read_hosts(hosts_path) if hosts_path.is_file() else (),
        prices=read_prices(prices_path) if prices_path.is_file() else (),
        allocations=tuple(allocations.rows),
        allocation_files=allocations.files,
        jobs=tuple(jobs.rows),
        job_files=jobs.files,
        unread=frozenset(allocations.unread | jobs.unread),
        set_aside=(*allocations.set_aside, *jobs.set_aside),
    )
