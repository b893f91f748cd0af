"""A full build in slices of the GPUs joins each slice's samples with the allocations' hour
pieces of the slice's own hosts, not the whole history's (build/full.py SLICE_JOINS): the
marts are those of a build in one go. So does each partition of a fanned-out build
(build/fanout.py), run here in this process as a Dask worker runs it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gpufleet.warehouse.build import build_models
from gpufleet.warehouse.build import full as full_module
from gpufleet.warehouse.build.fanout import FanOut
from gpufleet.warehouse.build.partition import Partition, PartitionResult, run_partition
from tests.scans import ScanCounter
from tests.test_models_fixtures import Fleet, built_once

pytestmark = pytest.mark.fleet

START = dt.datetime(2026, 11, 16, 8, 0, tzinfo=dt.UTC)
HOSTS = ("node-a", "node-b", "node-c", "node-d")
MARTS = ("gpu_daily", "gpu_hourly", "team_daily", "idle_episodes", "samples_attributed")


def _fleet() -> Fleet:
    """One GPU on each of four hosts, two hours of minute samples, each host's GPU allocated
    to a job of its own for most of them."""
    fleet = Fleet()
    fleet.user("alice", "ml")
    for number, host in enumerate(HOSTS):
        fleet.series(START, 120, step_s=60.0, gpu_uuid=f"GPU-{number}", host=host, gpu_util_pct=2.0)
        fleet.allocation(
            job_id=f"job-{number}",
            user="alice",
            team=None,
            host=host,
            start_ts=START + dt.timedelta(minutes=10 * number),
            end_ts=START + dt.timedelta(minutes=100),
        )
    return fleet


def _whole() -> Fleet:
    """_fleet() built in one go (a full build), once per process: the marts to compare."""

    def make() -> Fleet:
        fleet = _fleet()
        assert fleet.build().mode == "full"
        return fleet

    return built_once("test_full_slices._whole", make)


def _rows(fleet: Fleet, mart: str) -> list[tuple[Any, ...]]:
    return [
        tuple(round(value, 9) if isinstance(value, float) else value for value in row)
        for row in fleet.con.execute(f"select * from {mart} order by all").fetchall()
    ]


def test_each_slice_joins_its_own_hosts_allocation_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _whole()
    monkeypatch.setattr(full_module, "FULL_BUILD_CHUNK_SAMPLES", 120)  # a slice per GPU
    sliced = _fleet()
    counter = ScanCounter(sliced.con, tmp_path / "profile.json")
    assert build_models(counter, sliced.config).mode == "full"  # type: ignore[arg-type]
    for mart in MARTS:  # (sums in another order: floats to 9 digits)
        assert _rows(sliced, mart) == _rows(whole, mart), mart
    segments = sliced.con.execute(
        "select count(*) from samples_attributed_rows where job_key is not null"
    ).fetchone()
    assert segments and segments[0] > 0  # the allocations attributed samples
    # Each slice read its own host's pieces through _chunk_joined: 2 a host (each job runs
    # across 09:00), 8 in all, at most once a join (three). The whole history's pieces in
    # every slice's three joins would be 4 x 3 x 8 = 96 rows.
    read = counter.read("_chunk_joined")
    assert 0 < read <= 3 * 8, read


def test_each_partition_joins_its_own_hosts_allocation_pieces(tmp_path: Path) -> None:
    whole = _whole()
    fanned = _fleet()
    joined: list[int] = []

    def run(partitions: Sequence[Partition]) -> list[PartitionResult]:
        """Each partition as its worker runs it; first its models once more, counting the
        allocation pieces their joins read."""
        for partition in partitions:
            con = duckdb.connect(":memory:")
            for statement, parameters in partition.setup:
                con.execute(statement, list(parameters))
            counter = ScanCounter(con, tmp_path / f"profile-{partition.index}.json")
            for name, select in partition.models:
                counter.execute(f"create table {name} as\n{select}")
            joined.append(counter.read("_chunk_joined") + counter.read("int_allocation_segments"))
            con.close()
        return [run_partition(partition) for partition in partitions]

    fan_out = FanOut(config=fanned.config, run=run, workers=lambda: len(HOSTS))
    assert build_models(fanned.con, fanned.config, fan_out=fan_out).mode == "full"
    for mart in MARTS:
        assert _rows(fanned, mart) == _rows(whole, mart), mart
    # A partition a GPU, so a host: its 2 pieces, at most once a join (three). The whole
    # history's 8 pieces in every join would be 3 x 8 = 24 rows a partition.
    assert len(joined) == len(HOSTS) and all(0 < read <= 3 * 2 for read in joined), joined
