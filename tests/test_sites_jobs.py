"""Allocations and Slurm jobs at a site (docs/sites.md): an allocation row with a `cluster`
covers only that site's host of its name, one without covers the host of that name at every
site; `import slurm` and `import prometheus` write the site into their allocation rows; the
same job id at two Slurm clusters is two rows of job_efficiency, each with its own samples,
allocation rows and Slurm record; an incremental build equals a full one throughout."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from gpufleet.config import Config
from gpufleet.integrations.prometheus.pods import PodAllocation
from gpufleet.integrations.prometheus.run import _Window, _write_window
from gpufleet.integrations.slurm import import_slurm
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.refs.read import read_allocations
from tests.test_ingest import query
from tests.test_sites import (
    DAY,
    NEXT,
    _rows,
    _setup,
    _two_sites,
    _write,
    assert_incremental_equals_full,
)

pytestmark = pytest.mark.fleet

FIXTURES = Path(__file__).parent / "slurm_fixtures"
ALLOCATIONS = "raw/allocations/a.csv"
OPEN_FROM = dt.datetime.combine(DAY, dt.time(8), tzinfo=dt.UTC).isoformat()


def _allocation(config: Config, cluster: str | None) -> None:
    """Job j1 of alice (team gamma) on node01 GPU 0 from 08:00 UTC of DAY, open; at
    `cluster`, or (None) with no cluster column at all, as files before it were."""
    header = "job_id,user,team,host,gpu_index,start_ts,end_ts"
    row = f"j1,alice,gamma,node01,0,{OPEN_FROM},"
    if cluster is not None:
        header, row = f"{header},cluster", f"{row},{cluster}"
    path = config.data_dir / ALLOCATIONS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{header}\n{row}\n")


def _attribution(config: Config) -> set[tuple[Any, ...]]:
    return set(
        query(
            config,
            "select distinct cluster, host, attributed_by, team, job_id"
            " from samples_attributed where host = 'node01'",
        )
    )


def _jobs(config: Config) -> list[tuple[Any, ...]]:
    return query(
        config,
        "select cluster, job_id, gpu_name, team, round(gpu_hours * 3600), gpus"
        " from job_efficiency order by all",
    )


H100 = "NVIDIA H100 80GB HBM3"
ALLOCATED_A = ("siteA", "node01", "allocation", "gamma", "j1")
ALLOCATED_B = ("siteB", "node01", "allocation", "gamma", "j1")
BY_HOST_A = ("siteA", "node01", "host", "alpha", None)
BY_HOST_B = ("siteB", "node01", "host", "beta", None)


def test_a_csv_column_cluster_is_read_and_optional(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text(
        "cluster,job_id,user,team,host,gpu_index,start_ts,end_ts\n"
        f"siteA,j1,alice,,node01,0,{OPEN_FROM},\n"
        f" ,j2,alice,,node01,0,{OPEN_FROM},\n"
    )
    rows = read_allocations(path, "raw/allocations/a.csv")
    assert [(row.job_id, row.cluster) for row in rows] == [("j1", "siteA"), ("j2", None)]
    path.write_text(f"job_id,user,team,host,gpu_index,start_ts,end_ts\nj1,,,n,0,{OPEN_FROM},\n")
    assert read_allocations(path, "raw/allocations/a.csv")[0].cluster is None


def test_a_file_named_for_a_site_gives_its_rows_without_a_cluster_that_site(
    tmp_path: Path,
) -> None:
    """`<name>@<site>.csv` is how the mirror of a site's raw_location names its allocation
    files: their rows that name no cluster are that site's; a row's own cluster wins."""
    path = tmp_path / "slurm@siteB.csv"
    path.write_text(
        "job_id,user,team,host,gpu_index,start_ts,end_ts,cluster\n"
        f"j1,alice,,node01,0,{OPEN_FROM},,\n"
        f"j2,alice,,node01,0,{OPEN_FROM},,siteA\n"
    )
    rows = read_allocations(path, "raw/allocations/slurm@siteB.csv")
    assert [(row.job_id, row.cluster) for row in rows] == [("j1", "siteB"), ("j2", "siteA")]
    plain = tmp_path / "slurm.csv"
    plain.write_text(f"job_id,user,team,host,gpu_index,start_ts,end_ts\nj1,,,n,0,{OPEN_FROM},\n")
    assert read_allocations(plain, "raw/allocations/slurm.csv")[0].cluster is None


def test_an_allocation_of_a_site_covers_only_that_sites_host_of_its_name(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    _two_sites(config, DAY, stem="a")
    _allocation(config, "siteA")
    ingest(config, today=NEXT)
    assert build(config).mode == "full"
    assert _attribution(config) == {ALLOCATED_A, BY_HOST_B}
    # the job's row is siteA's, with siteA's 6 samples of 10 s
    assert _jobs(config) == [("siteA", "j1", H100, "gamma", 60, 1)]
    # the next day, incrementally: the same
    _two_sites(config, NEXT, stem="b")
    ingest(config, today=NEXT)
    assert build(config).mode == "incremental"
    assert _attribution(config) == {ALLOCATED_A, BY_HOST_B}
    assert _jobs(config) == [("siteA", "j1", H100, "gamma", 120, 1)]
    assert_incremental_equals_full(config)
    # the row moves to siteB (only its cluster changes): siteB's host is the job's now
    _allocation(config, "siteB")
    ingest(config, today=NEXT)
    assert build(config).mode == "incremental"
    assert _attribution(config) == {BY_HOST_A, ALLOCATED_B}
    assert _jobs(config) == [("siteB", "j1", H100, "gamma", 180, 1)]
    assert_incremental_equals_full(config)


def test_an_allocation_of_no_site_covers_the_host_of_its_name_at_every_site(
    tmp_path: Path,
) -> None:
    config = _setup(tmp_path)
    _two_sites(config, DAY, stem="a")
    _allocation(config, None)
    ingest(config, today=NEXT)
    build(config)
    assert _attribution(config) == {ALLOCATED_A, ALLOCATED_B}
    # one job id whose samples are at two sites: a row for each site
    assert _jobs(config) == [
        ("siteA", "j1", H100, "gamma", 60, 1),
        ("siteB", "j1", H100, "gamma", 90, 1),
    ]
    _two_sites(config, NEXT, stem="b")
    ingest(config, today=NEXT)
    assert build(config).mode == "incremental"
    assert_incremental_equals_full(config)


def test_an_allocation_of_a_site_covers_a_host_of_no_site(tmp_path: Path) -> None:
    """A fleet without sites whose scheduler names its cluster is as it was."""
    config = Config(data_dir=tmp_path / "data")
    _write(config, _rows(DAY, "node01", "GPU-0", None), None, "a")
    _allocation(config, "hpc")
    ingest(config, today=NEXT)
    build(config)
    assert _attribution(config) == {(None, "node01", "allocation", "gamma", "j1")}
    assert _jobs(config) == [("hpc", "j1", H100, "gamma", 60, 1)]


# --- Slurm: the same job id at two clusters ---------------------------------------------

SLURM_DAY = dt.date(2026, 11, 27)  # the recorded jobs' day (tests/slurm_fixtures)


def _import_cluster(config: Config, tmp_path: Path, cluster: str) -> None:
    """The recorded sacct and squeue output of Slurm 24.11, as cluster `cluster`'s."""
    paths = []
    for name in ("sacct", "squeue"):
        text = (FIXTURES / f"{name}-24.11.json").read_text()
        path = tmp_path / f"{name}-{cluster}.json"
        path.write_text(text.replace('"cluster": "gpufleet"', f'"cluster": "{cluster}"'))
        paths.append(path)
    import_slurm(config, sacct_json=paths[0], squeue_json=paths[1], warn=lambda _: None)


def _node01_gpu2(config: Config, cluster: str, count: int, day: dt.date, stem: str) -> None:
    """`count` samples of gpu-node01's GPU 2 (job 2's, running since 07:54 UTC) at
    `cluster`, 10 s apart from 09:00 UTC of `day`."""
    rows = _rows(day, "gpu-node01", f"GPU-{cluster}", cluster, count=count)
    _write(config, [{**row, "gpu_index": 2} for row in rows], cluster, stem)


def test_two_slurm_clusters_same_job_id_are_two_jobs(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    _import_cluster(config, tmp_path, "east")
    rows = (config.allocations_dir / "slurm-east-2026-11-27.csv").read_text().splitlines()
    assert rows[0].endswith(",cluster") and all(row.endswith(",east") for row in rows[1:])
    _node01_gpu2(config, "east", 6, SLURM_DAY, "a")
    _node01_gpu2(config, "west", 9, SLURM_DAY, "a")  # west's allocations: not yet imported
    ingest(config, today=SLURM_DAY + dt.timedelta(days=1))
    assert build(config).mode == "full"
    jobs = "select cluster, job_id, round(gpu_hours * 3600), state from job_efficiency"
    two = f"{jobs} where job_id = '2' order by all"
    # west's samples of node01 are no allocation of east's: attributed by host
    assert query(config, two) == [("east", "2", 60.0, "RUNNING")]
    _import_cluster(config, tmp_path, "west")
    _node01_gpu2(config, "east", 6, SLURM_DAY + dt.timedelta(days=1), "b")
    ingest(config, today=SLURM_DAY + dt.timedelta(days=2))
    assert build(config).mode == "incremental"
    assert query(config, two) == [("east", "2", 120.0, "RUNNING"), ("west", "2", 90.0, "RUNNING")]
    # job 5 (allocated on GPU 0 of both nodes, no samples) at each cluster: a row each
    assert query(config, f"{jobs} where job_id = '5' order by all") == [
        ("east", "5", 0.0, "RUNNING"),
        ("west", "5", 0.0, "RUNNING"),
    ]
    # each cluster's row sums only its own allocation rows, open and with no samples: up to
    # the import that last saw the job running (its record's seen_ts)
    alloc = query(
        config,
        "select cluster, gpus, alloc_gpu_hours > 0 from job_efficiency"
        " where job_id = '5' order by all",
    )
    assert alloc == [("east", 2, True), ("west", 2, True)]
    assert_incremental_equals_full(config)


def test_an_allocation_file_of_the_release_before_cluster_gains_it(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    path = config.allocations_dir / "slurm-gpufleet-2026-11-27.csv"
    path.parent.mkdir(parents=True)
    old = (
        "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
        "2,gf-bob,speech,gpu-node01,2,2026-11-27T07:54:13+00:00,\n"  # seen again: gains it
        "9,gf-bob,speech,gpu-node01,3,2026-11-27T07:00:00+00:00,\n"  # not seen: stays empty
    )
    path.write_text(old)
    assert read_allocations(path, "x")[0].cluster is None  # read as it is
    _import_cluster(config, tmp_path, "gpufleet")
    lines = path.read_text().splitlines()
    assert lines[0] == "job_id,user,team,host,gpu_index,start_ts,end_ts,cluster"
    assert [line.split(",")[-1] for line in lines[1:] if line.split(",")[0] in ("2", "9")] == [
        "",
        "gpufleet",
    ]


def test_a_gpustat_job_takes_the_slurm_team_of_its_sites_cluster(tmp_path: Path) -> None:
    """Job 4242 of east (team vision) and of west (speech, started later): the samples that
    name it take their site's cluster's team; at a site of neither cluster, the latest
    start's, as with one cluster."""
    config = Config(data_dir=tmp_path / "data")
    config.jobs_dir.mkdir(parents=True)
    start = dt.datetime.combine(DAY, dt.time(8), tzinfo=dt.UTC)
    (config.jobs_dir / "jobs.csv").write_text(
        "job_id,cluster,team,start_ts\n"
        f"4242,east,vision,{start.isoformat()}\n"
        f"4242,west,speech,{(start + dt.timedelta(minutes=30)).isoformat()}\n"
    )
    for site in ("east", "west", "north"):
        rows = _rows(DAY, "node01", f"GPU-{site}", site)
        _write(config, [{**r, "alloc_job_id": "4242", "alloc_user": "u"} for r in rows], site, "a")
    ingest(config, today=NEXT)
    build(config)
    assert set(
        query(
            config, "select distinct cluster, attributed_by, team, job_id from samples_attributed"
        )
    ) == {
        ("east", "allocation", "vision", "4242"),
        ("west", "allocation", "speech", "4242"),
        ("north", "allocation", "speech", "4242"),
    }
    assert query(
        config,
        "select cluster, team, start_ts from job_efficiency where cluster <> 'north' order by all",
    ) == [("east", "vision", start), ("west", "speech", start + dt.timedelta(minutes=30))]


@pytest.mark.parametrize("site", [None, "siteA"])
def test_import_prometheus_writes_its_site_into_allocation_rows(
    tmp_path: Path, site: str | None
) -> None:
    config = Config(data_dir=tmp_path / "data", cluster=site)
    start = dt.datetime.combine(DAY, dt.time(9), tzinfo=dt.UTC)
    pod = PodAllocation("ns/p", None, "ml", "node01", 0, start, start + dt.timedelta(hours=1))
    _write_window(config, "http://prom:9090", _Window(tables={}, allocations=[pod]), 0, 1)
    (path,) = config.allocations_dir.iterdir()
    (row,) = read_allocations(path, "raw/allocations/x.csv")
    assert (row.job_id, row.cluster) == ("ns/p", site)
