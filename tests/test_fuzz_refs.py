"""Fuzzing the reference files (ref/users.csv, teams.csv, hosts.csv, prices.csv,
accounts.csv, namespaces.csv) and the allocation and job files (raw/allocations,
raw/jobs): each reader returns its rows or raises GpufleetError naming the file; `gpufleet
ingest` over such a file exits 0, or 1 with one line naming it, and once the file is moved
away loads everything else; nothing is written outside the data directory."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.errors import GpufleetError
from gpufleet.integrations.prometheus.pods import read_namespaces
from gpufleet.integrations.slurm.accounts import read_accounts
from gpufleet.warehouse.refs.jobs import read_jobs
from gpufleet.warehouse.refs.read import (
    read_allocations,
    read_hosts,
    read_prices,
    read_teams,
    read_users,
)
from gpufleet.warehouse.refs.records import (
    ALLOCATIONS_COLUMNS,
    ALLOCATIONS_OPTIONAL,
    HOSTS_COLUMNS,
    HOSTS_OPTIONAL,
    JOBS_COLUMNS,
    JOBS_OPTIONAL,
    PRICES_COLUMNS,
    PRICES_OPTIONAL,
    TEAMS_COLUMNS,
    TEAMS_OPTIONAL,
    USERS_COLUMNS,
    USERS_OPTIONAL,
)
from tests.fuzzing import (
    assert_kept,
    csv_texts,
    examples,
    file_bytes,
    run_cli,
    scratch,
    tree,
    written_outside,
)
from tests.test_ingest import DAY1, reading, sample, write_samples

pytestmark = pytest.mark.fleet


class Kind(NamedTuple):
    relative: str  # below the data directory
    columns: tuple[str, ...]
    optional: tuple[str, ...]
    read: Callable[[Path, str], Any]  # (path, the name errors must carry)


KINDS = (
    Kind("ref/users.csv", USERS_COLUMNS, USERS_OPTIONAL, read_users),
    Kind("ref/teams.csv", TEAMS_COLUMNS, TEAMS_OPTIONAL, read_teams),
    Kind("ref/hosts.csv", HOSTS_COLUMNS, HOSTS_OPTIONAL, read_hosts),
    Kind("ref/prices.csv", PRICES_COLUMNS, PRICES_OPTIONAL, read_prices),
    Kind(
        "raw/allocations/slurm-2026-11-16.csv",
        ALLOCATIONS_COLUMNS,
        ALLOCATIONS_OPTIONAL,
        lambda path, shown: read_allocations(path, path.name, shown),
    ),
    Kind(
        "raw/jobs/slurm-2026-11-16.csv",
        JOBS_COLUMNS,
        JOBS_OPTIONAL,
        lambda path, shown: read_jobs(path, path.name, shown),
    ),
    Kind("ref/accounts.csv", ("account", "team"), ("valid_from",), read_accounts),
    Kind(
        "ref/namespaces.csv",
        ("namespace", "team"),
        ("valid_from",),
        lambda path, shown: read_namespaces(path),
    ),
)
# The files `gpufleet ingest` reads (accounts.csv and namespaces.csv are the importers').
INGESTED = KINDS[:6]


@st.composite
def reference_files(draw: st.DrawFn, kinds: tuple[Kind, ...] = KINDS) -> tuple[Kind, bytes]:
    kind = draw(st.sampled_from(kinds))
    return kind, draw(file_bytes(csv_texts(kind.columns, kind.optional)))


@given(case=reference_files())
@examples(200)
def test_each_reader_returns_rows_or_names_the_file(case: tuple[Kind, bytes]) -> None:
    kind, content = case
    with scratch() as folder:
        path = folder / Path(kind.relative).name
        path.write_bytes(content)
        try:
            kind.read(path, str(path))
        except GpufleetError as exc:
            assert str(exc).startswith(f"{path}:"), exc


def _samples(data_dir: Path) -> int:
    with reading(data_dir / "warehouse.duckdb") as con:
        row = con.execute("select count(*) from samples").fetchone()
    return int(row[0]) if row else 0


@given(case=reference_files(INGESTED))
@examples(10)
def test_ingest_loads_or_names_the_file_and_then_loads_the_rest(case: tuple[Kind, bytes]) -> None:
    kind, content = case
    with scratch() as root:
        data_dir = root / "data"
        write_samples(data_dir, f"{DAY1}/a.parquet", [sample(0), sample(10)])
        bad = data_dir / kind.relative
        bad.parent.mkdir(parents=True, exist_ok=True)
        bad.write_bytes(content)
        before = tree(root)
        argv = ["--data-dir", str(data_dir), "ingest"]

        outcome = run_cli(argv)
        assert_kept(outcome, names=(str(bad), kind.relative))
        assert not written_outside(root, data_dir, before)
        if outcome.status == 0:
            assert _samples(data_dir) == 2
            return
        shutil.move(bad, root / "set-aside.csv")
        assert_kept(again := run_cli(argv))
        assert again.status == 0, again
        assert _samples(data_dir) == 2
