"""A file's site from where it is (docs/sites.md): each site's own S3 store
(`[clusters.<site>] raw_location`, against a real S3 store, tests/s3_stack.py) copied into
`host=<host>@<site>` folders, and a local `host=<host>@<site>` folder, give their
cluster-less rows that site; rows that name another site than their folder are quarantined,
whichever way the batch loads; a bad site location is one line."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.config import Config, S3Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.integrations import mirror
from gpufleet.storage.s3 import S3Location, s3_filesystem
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import cut, ingest
from tests.s3_stack import BUCKET, S3Store
from tests.test_ingest import query, read_by_duckdb
from tests.test_sites import DAY, NEXT, _rows

pytestmark = pytest.mark.fleet

ALLOCATIONS = (
    "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
    f"101,alice,vision,node01,0,{DAY}T08:00:00Z,{DAY}T10:00:00Z\n"
)
SITE_REASON = "column cluster: value site-a is not the site its host= folder names (site-b)"


def _table(rows: list[dict[str, Any]], *, cluster_column: bool = False) -> pa.Table:
    """An older collector's file: no `cluster` column (or one of these rows' values)."""
    table = pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA.with_metadata(file_metadata()))
    return table if cluster_column else table.drop_columns(["cluster"])


def _local(config: Config, folder: str, name: str, table: pa.Table) -> None:
    path = config.samples_dir / f"date={DAY}" / folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


# --- a local host=<host>@<site> folder ---------------------------------------------------


@pytest.fixture(params=["polars", "DuckDB", "sliced"])
def load_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each way a batch is read: by polars; by DuckDB; a large file in slices."""
    if request.param == "DuckDB":
        read_by_duckdb(monkeypatch)
    elif request.param == "sliced":
        monkeypatch.setattr(cut, "MAX_ROWS_PER_READ", 3)
    return str(request.param)


def test_a_local_site_folder_gives_its_cluster_less_rows_its_site(
    tmp_path: Path, load_path: str
) -> None:
    config = Config(data_dir=tmp_path / "data")
    _local(config, "host=node01@site-b", "old.parquet", _table(_rows(DAY, "node01", "G-B", None)))
    _local(config, "host=node01", "plain.parquet", _table(_rows(DAY, "node01", "G-0", None)))
    said = _rows(DAY, "node02", "G-A", "site-a", count=4)
    _local(config, "host=node02@site-b", "says.parquet", _table(said, cluster_column=True))
    warned: list[str] = []

    result = ingest(config, today=NEXT, warn=warned.append)
    assert result.samples_loaded == 12
    assert [(q.path.rsplit("/", 2)[-2], q.reason) for q in result.quarantined] == [
        ("host=node02@site-b", SITE_REASON)
    ]
    assert len(warned) == 1 and SITE_REASON in warned[0] and "\n" not in warned[0]
    compacted = sorted(p.parent.name for p in config.samples_dir.rglob("compacted-*.parquet"))
    assert compacted == ["host=node01", "host=node01@site-b"]
    assert query(config, "select cluster, count(*) from samples group by all order by all") == [
        ("site-b", 6),
        (None, 6),
    ]
    build(config)
    by_site = "select cluster, host, count(*) from samples_attributed group by all order by all"
    assert query(config, by_site) == [("site-b", "node01", 6), (None, "node01", 6)]


def test_an_empty_cluster_in_a_site_folder_names_no_site_and_takes_the_folders(
    tmp_path: Path, load_path: str
) -> None:
    # Empty text is no site (stg_samples): the folder's site, not a file quarantined.
    config = Config(data_dir=tmp_path / "data")
    empty = _table(_rows(DAY, "node01", "G-B", ""), cluster_column=True)
    _local(config, "host=node01@site-b", "empty.parquet", empty)

    result = ingest(config, today=NEXT)
    assert (result.samples_loaded, result.quarantined) == (6, ())
    assert query(config, "select cluster, count(*) from samples group by all") == [("site-b", 6)]


def test_a_folder_site_with_glob_characters_is_the_same_once_compacted(tmp_path: Path) -> None:
    # Compaction reads the files through literal_path patterns: the site is the folder's.
    config = Config(data_dir=tmp_path / "data")
    _local(config, "host=node01@s[1]*", "old.parquet", _table(_rows(DAY, "node01", "G-B", None)))
    assert ingest(config, compact=False).samples_loaded == 6
    path = next(config.samples_dir.rglob("old.parquet"))
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)  # its rows judged again
    assert ingest(config, compact=False).quarantined == ()
    compaction = ingest(config, today=NEXT).compaction  # from its files
    assert compaction is not None and compaction.partitions == 1
    assert query(config, "select cluster, count(*) from samples group by all") == [("s[1]*", 6)]
    (compacted,) = config.samples_dir.rglob("compacted-*.parquet")
    assert set(pq.read_table(compacted, columns=["cluster"]).column(0).to_pylist()) == {"s[1]*"}


def test_a_site_folders_file_touched_after_its_load_holds_the_rows_loaded(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    _local(config, "host=node01@site-b", "old.parquet", _table(_rows(DAY, "node01", "G-B", None)))
    assert ingest(config, compact=False).samples_loaded == 6
    path = next(config.samples_dir.rglob("old.parquet"))
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)  # copied again, same bytes
    again = ingest(config, compact=False)
    assert (again.files_loaded, again.quarantined) == (0, ())


# --- each site's own S3 store ------------------------------------------------------------


@pytest.fixture
def store(s3: S3Store, monkeypatch: pytest.MonkeyPatch) -> S3Store:
    for name, value in s3.environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return s3


def _put(store: S3Store, url: str, key: str, data: pa.Table | str) -> None:
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    with fs.open_output_stream(S3Location.parse(url).path(key)) as out:
        if isinstance(data, str):
            out.write(data.encode())
        else:
            pq.write_table(data, out)


@pytest.mark.slow
def test_each_sites_store_gives_its_files_its_site_and_two_node01s_stay_two(
    tmp_path: Path, store: S3Store, caplog: pytest.LogCaptureFixture
) -> None:
    site_a, site_b = (f"s3://{BUCKET}/{tmp_path.name}/{site}" for site in ("site-a", "site-b"))
    key = f"samples/date={DAY}/host=node01/node01-0900.parquet"  # the same key in both
    _put(store, site_a, key, _table(_rows(DAY, "node01", "GPU-A0", None, util=50.0)))
    _put(store, site_b, key, _table(_rows(DAY, "node01", "GPU-B0", None, util=20.0, count=9)))
    stray = f"samples/date={DAY}/host=node02@site-b/x.parquet"  # another site's folder
    _put(store, site_a, stray, _table(_rows(DAY, "node02", "GPU-X", None)))
    _put(store, site_a, "allocations/slurm.csv", ALLOCATIONS)
    _put(store, site_b, "allocations/slurm.csv", ALLOCATIONS.replace("alice", "bob"))
    config = Config(
        data_dir=tmp_path / "pipeline",
        site_locations=(("site-a", site_a), ("site-b", site_b)),
        s3=S3Config(endpoint_url=store.endpoint_url),
    )

    with caplog.at_level(logging.WARNING, logger="gpufleet.ingest"):
        result = ingest(config, today=NEXT)
    refused = [r.getMessage() for r in caplog.records if "not copied" in r.getMessage()]
    assert refused == [
        f"{site_a}/{stray}: not copied: a sample file of site site-a's raw_location must be "
        "in a host=<host>/ or host=<host>@site-a/ folder, not another site's"
    ]
    assert (result.files_loaded, result.samples_loaded, result.allocations) == (2, 15, 2)
    raw = config.data_dir / "raw"
    assert sorted(p.name for p in (raw / "allocations").iterdir()) == [
        "slurm@site-a.csv",
        "slurm@site-b.csv",
    ]
    assert sorted(p.parent.name for p in raw.rglob("compacted-*.parquet")) == [
        "host=node01@site-a",
        "host=node01@site-b",
    ]
    build(config)
    by_site = "select cluster, host, count(*) from samples_attributed group by all order by all"
    assert query(config, by_site) == [("site-a", "node01", 6), ("site-b", "node01", 9)]
    assert query(config, "select cluster, host from host_daily order by all") == [
        ("site-a", "node01"),
        ("site-b", "node01"),
    ]
    # each store's objects recorded apart; nothing copied, nor warned about, again
    record = (raw / mirror.RECORD_NAME).read_text()
    assert record.count(f'"key": "{key}"') == 2
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpufleet.ingest"):
        again = mirror.mirror_raw_location(config)
    assert [(r.location, r.objects, r.copied) for r in again] == [(site_a, 3, 0), (site_b, 2, 0)]
    assert not caplog.records


def test_a_sites_raw_location_is_checked_in_one_line(tmp_path: Path) -> None:
    toml = tmp_path / "gpufleet.toml"
    toml.write_text(
        'raw_location = "s3://fleet-raw/all"\n'
        '[clusters.site-a]\nraw_location = "s3://site-a-gpu/raw/"\n'
        '[clusters.site-b]\nraw_location = "s3://site-b-gpu"\ntimezone = "Asia/Tokyo"\n'
    )
    config = load_config(config_path=toml)
    assert config.site_locations == (
        ("site-a", "s3://site-a-gpu/raw"),
        ("site-b", "s3://site-b-gpu"),
    )
    assert config.sites == (("site-b", "Asia/Tokyo"),)  # site-a: the top-level zone
    for text, problem in (
        (
            '[clusters.site-a]\nraw_location = "/mnt/site-a"\n',
            "line 2: 'clusters.site-a.raw_location' must be an s3://bucket/prefix URL, "
            "got '/mnt/site-a'",
        ),
        (
            'raw_location = "s3://fleet-raw/all"\n'
            '[clusters.site-a]\nraw_location = "s3://fleet-raw/all/"\n',
            "'clusters.site-a.raw_location' (s3://fleet-raw/all) and 'raw_location' "
            "(s3://fleet-raw/all) overlap",
        ),
        ('[clusters.site-a]\nraw_locaton = "s3://a-gpu"\n', "unknown key"),
        (
            '[clusters.site-a]\nraw_location = "s3://site-a-gpu/../x"\n',
            "line 2: 'clusters.site-a.raw_location' must be an s3://bucket/prefix URL: an empty, "
            "'.' or '..' part in the prefix of 's3://site-a-gpu/../x'",
        ),
    ):
        toml.write_text(text)
        with pytest.raises(GpufleetError, match=re.escape(problem)) as failed:
            load_config(config_path=toml)
        assert "\n" not in str(failed.value)


@pytest.mark.slow
def test_a_sites_bucket_that_does_not_exist_is_one_line(tmp_path: Path, store: S3Store) -> None:
    site_a = f"s3://{BUCKET}/{tmp_path.name}/site-a"
    _put(store, site_a, "allocations/slurm.csv", ALLOCATIONS)
    config = Config(
        data_dir=tmp_path / "pipeline",
        site_locations=(("site-a", site_a), ("site-b", "s3://site-b-no-such-bucket")),
        s3=S3Config(endpoint_url=store.endpoint_url),
    )
    with pytest.raises(GpufleetError) as failed:
        ingest(config)
    assert str(failed.value) == (
        "'clusters.site-b.raw_location' (s3://site-b-no-such-bucket): no bucket "
        f"'site-b-no-such-bucket' at {store.endpoint_url}: create it, or correct the setting"
    )


def test_a_site_stores_objects_go_to_their_sites_folders_and_names() -> None:
    place = mirror.local_path
    assert place("samples/date=D/host=n1/f.parquet", None) == "samples/date=D/host=n1/f.parquet"
    assert place("samples/date=D/host=n1/f.parquet", "a") == "samples/date=D/host=n1@a/f.parquet"
    assert place("samples/date=D/host=n1@a/f.parquet", "a") == "samples/date=D/host=n1@a/f.parquet"
    assert place("samples/date=D/host=n1@b/f.parquet", "a") is None
    assert place("samples/date=D/f.parquet", "a") is None
    assert place("allocations/x.csv", "a") == "allocations/x@a.csv"
    assert place("jobs/sacct.csv", "a") == "jobs/sacct@a.csv"
