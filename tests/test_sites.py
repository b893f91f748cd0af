"""Several sites in one warehouse (the `cluster` dimension): the sample column written by the
collector and `import prometheus`, read from files with or without it and from warehouses of
the release before it, a host's site from its samples or hosts.csv, host names repeated
across sites kept apart (folders, the lake, every mart), and per-site figures checked
against the test's own samples; an incremental build equals a full one."""

from __future__ import annotations

import datetime as dt
import io
import re
from collections.abc import Callable
from dataclasses import replace
from html import unescape
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.cli import main
from gpufleet.collectors.collect import Collector
from gpufleet.collectors.schema import (
    COLLECTOR_SCHEMA,
    SAMPLE_SCHEMA,
    V1_1_SCHEMA,
    file_metadata,
    folder_host,
    host_folder,
    schema_with_metadata,
)
from gpufleet.collectors.writer import write_sample_files
from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.prometheus.run import _Window, _write_window
from gpufleet.integrations.slurm.run import collector_hosts
from gpufleet.site_names import check_cluster
from gpufleet.warehouse.base.raw_tables import SAMPLE_COLUMNS, ensure_raw_tables
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import connect_read_only
from tests.fake_nvml import ManualClock, fleet_scenario, install_fake
from tests.templates import made_once
from tests.test_incremental import MARTS, assert_same_rows, mart_table
from tests.test_ingest import T0, query, sample

pytestmark = pytest.mark.fleet

DAY = T0.date()  # 2026-11-16, from 09:00 UTC
NEXT = DAY + dt.timedelta(days=1)
# hosts.csv: node01 is alpha's at siteA and beta's at siteB; b-* hosts are siteB's (their
# samples say no site) and beta's
HOSTS_CSV = "host_glob,team,cluster\nnode01,alpha,siteA\nnode01,beta,siteB\nb-*,beta,siteB\n"


def _rows(
    day: dt.date,
    host: str,
    gpu: str,
    cluster: str | None,
    *,
    count: int = 6,
    util: float = 50.0,
    step_s: int = 10,
) -> list[dict[str, Any]]:
    """`count` samples of `gpu` on `host` from 09:00 UTC of `day`, no process (attributed
    by host), at `cluster`."""
    start = dt.datetime.combine(day, T0.time(), tzinfo=dt.UTC)
    return [
        {
            **sample(step_s * n, gpu=gpu, util=util, day=start),
            "host": host,
            "processes": None,
            "energy_mj": None,
            "interval_s": float(step_s),
            "cluster": cluster,
        }
        for n in range(count)
    ]


def _write(config: Config, rows: list[dict[str, Any]], cluster: str | None, stem: str) -> None:
    """A collector's file of these rows, where the collector of that site writes it."""
    records = [{**row, "ts": int(row["ts"].timestamp() * 1_000_000)} for row in rows]
    write_sample_files(
        records, samples_root=config.samples_dir, host=rows[0]["host"], stem=stem, cluster=cluster
    )


def _two_sites(config: Config, day: dt.date, *, stem: str) -> dict[str, list[dict[str, Any]]]:
    """node01 at siteA and at siteB (their own cluster), b-gpu2 (no cluster: siteB by
    hosts.csv) on `day`; the rows by site-qualified host."""
    written = {
        "siteA/node01": _rows(day, "node01", "GPU-A0", "siteA", util=50.0),
        "siteB/node01": _rows(day, "node01", "GPU-B0", "siteB", util=20.0, count=9),
        "siteB/b-gpu2": _rows(day, "b-gpu2", "GPU-B2", None, util=80.0, count=4),
    }
    for rows in written.values():
        _write(config, rows, rows[0]["cluster"], stem)
    return written


# each site's own zone, and another for the rest (the configured timezone)
ZONES = {
    "timezone": "Europe/Berlin",
    "sites": (("siteA", "Asia/Tokyo"), ("siteB", "America/New_York")),
}


def _setup(tmp_path: Path, **settings: Any) -> Config:
    config = Config(data_dir=tmp_path / "data", **settings)
    (config.ref_dir).mkdir(parents=True)
    (config.ref_dir / "hosts.csv").write_text(HOSTS_CSV)
    return config


def assert_incremental_equals_full(config: Config) -> None:
    """The marts as the last (incremental) build left them are those of a full build."""
    with connect_read_only(config) as con:
        incremental = {name: mart_table(con, name) for name in MARTS}
    assert build(config, full=True).mode == "full"
    with connect_read_only(config) as con:
        for name in MARTS:
            assert_same_rows(incremental[name], mart_table(con, name), name)


def _two_sites_built(tmp_path: Path, **settings: Any) -> Config:
    """`_two_sites` of DAY ingested on NEXT (straight into the lake) and built in full, with
    these settings: made once per test process and copied (tests/templates.py). The copy's
    `samples` view names the first's lake files until a build of the copy makes it anew."""
    made_once(f"test_sites._two_sites_built({settings})", _build_two_sites(settings), tmp_path)
    return Config(data_dir=tmp_path / "data", **settings)


def _build_two_sites(settings: dict[str, Any]) -> Callable[[Path], None]:
    def fill(folder: Path) -> None:
        config = _setup(folder, **settings)
        _two_sites(config, DAY, stem="a")
        ingest(config, today=NEXT)
        assert build(config).mode == "full"

    return fill


# --- names and folders -----------------------------------------------------------------


def test_a_site_name_is_a_plain_path_component_and_a_folder_names_its_host_and_site() -> None:
    assert check_cluster("site-A.eu_1") == "site-A.eu_1"
    for bad in ("", "../x", "a/b", ".hidden", "_x", "a b", "a@b", "x" * 65):
        with pytest.raises(ValueError, match="not a site name"):
            check_cluster(bad)
    assert host_folder("node01", "siteA") == "node01@siteA"
    assert host_folder("node01", None) == "node01"
    assert folder_host("node01@siteA") == ("node01", "siteA")
    assert folder_host("node01") == ("node01", None)
    # the last column of contract v1.1, the v1.2 columns after it
    assert V1_1_SCHEMA.names[-1] == "cluster" and SAMPLE_COLUMNS[_CLUSTER] == ("cluster", "varchar")


def test_the_collector_records_its_site_in_every_row_and_in_its_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mono, wall = ManualClock(1000.0), ManualClock(1_795_000_000.0)
    install_fake(monkeypatch, fleet_scenario(2), clock_us=mono.us)
    collector = Collector(
        data_dir=tmp_path / "data",
        interval_s=10.0,
        flush_s=600.0,
        host="node01",
        wall_clock=wall,
        monotonic=mono,
        stderr=io.StringIO(),
        fsync=False,
        cluster="siteA",
    )
    collector.start()
    for _ in range(3):
        mono.advance(10.0)
        wall.advance(10.0)
        assert {row.cluster for row in collector.tick()} == {"siteA"}
    assert collector.flush()
    files = sorted(collector.samples_root.rglob("*.parquet"))
    assert files and {f.parent.name for f in files} == {"host=node01@siteA"}
    table = pq.read_table(files[0])
    assert table.schema == COLLECTOR_SCHEMA.with_metadata(table.schema.metadata)
    assert set(table["cluster"].to_pylist()) == {"siteA"}
    with pytest.raises(ValueError, match="not a site name"):
        Collector(data_dir=tmp_path / "x", interval_s=10, flush_s=60, host="h", cluster="a/b")


def test_collect_takes_cluster_from_the_flag_else_the_configuration(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str | None] = []

    def fake_run_collector(**kwargs: Any) -> int:
        seen.append(kwargs["cluster"])
        return 0

    monkeypatch.setattr("gpufleet.collectors.service.run_collector", fake_run_collector)
    data = tmp_path / "data"
    data.mkdir()
    assert main(["--data-dir", str(data), "collect", "--cluster", "siteB"]) == 0
    (data / "gpufleet.toml").write_text('cluster = "siteA"\n')
    assert main(["--data-dir", str(data), "collect"]) == 0
    assert main(["--data-dir", str(data), "collect", "--cluster", "siteC"]) == 0
    assert seen == ["siteB", "siteA", "siteC"]
    with pytest.raises(SystemExit):
        main(["--data-dir", str(data), "collect", "--cluster", "../up"])
    assert "not a site name" in capsys.readouterr().err


def test_the_configuration_checks_its_site_names(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.toml"
    path.write_text('cluster = "siteA"\n[prometheus]\ncluster = "siteB"\n')
    config = load_config(config_path=path)
    assert (config.cluster, config.prometheus.cluster) == ("siteA", "siteB")
    path.write_text('[prometheus]\ncluster = "a b"\n')
    with pytest.raises(GpufleetError, match=r"line 2: 'prometheus.cluster' must be"):
        load_config(config_path=path)


def test_import_prometheus_writes_its_site_in_rows_and_folders(tmp_path: Path) -> None:
    row = {**sample(0), "host": "node01", "processes": None}
    table = pa.Table.from_pylist([row], schema=schema_with_metadata())
    site = Config(data_dir=tmp_path / "a", cluster="siteA")
    assert _write_window(site, "http://prom:9090", _Window({"node01": table}, []), 0, 60) == 1
    files = list(site.samples_dir.rglob("*.parquet"))
    assert [f.parent.name for f in files] == ["host=node01@siteA"]
    assert pq.read_table(files[0])["cluster"].to_pylist() == ["siteA"]
    plain = Config(data_dir=tmp_path / "b")
    _write_window(plain, "http://prom:9090", _Window({"node01": table}, []), 0, 60)
    files = list(plain.samples_dir.rglob("*.parquet"))
    assert [f.parent.name for f in files] == ["host=node01"]
    assert pq.read_table(files[0])["cluster"].to_pylist() == [None]
    # [prometheus] cluster wins over the top-level one
    both = Config(data_dir=tmp_path / "c", cluster="siteA")
    both = replace(both, prometheus=replace(both.prometheus, cluster="siteB"))
    _write_window(both, "http://prom:9090", _Window({"node01": table}, []), 0, 60)
    assert [f.parent.name for f in both.samples_dir.rglob("*.parquet")] == ["host=node01@siteB"]


def test_slurm_matches_collector_hosts_by_name_whatever_their_site(tmp_path: Path) -> None:
    config = _setup(tmp_path)
    _two_sites(config, DAY, stem="a")
    assert collector_hosts(config, DAY, DAY) == {"node01", "b-gpu2"}


# --- one warehouse, two sites ----------------------------------------------------------


def _expected(written: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """host_daily and team_daily per site, from the rows as written (every sample is
    contiguous and attributed by host)."""
    hosts = {}
    for key, rows in written.items():
        site, host = key.split("/")
        hosts[(site, host)] = (
            len({r["gpu_uuid"] for r in rows}),
            len(rows),
            sum(r["interval_s"] for r in rows) / 3600,
        )
    team_of = {("siteA", "node01"): "alpha", ("siteB", "node01"): "beta"}
    teams: dict[tuple[str, str], list[float]] = {}
    for (site, host), (gpus, _, hours) in hosts.items():
        team = team_of.get((site, host), "beta")
        total = teams.setdefault((site, team), [0, 0.0, 0.0])
        total[0] += gpus
        total[1] += hours
    for key, rows in written.items():
        site, host = key.split("/")
        team = team_of.get((site, host), "beta")
        teams[(site, team)][2] += sum(r["gpu_util_pct"] / 100 * r["interval_s"] for r in rows)
    return {"hosts": hosts, "teams": teams}


def test_two_sites_share_a_host_name_and_keep_apart_through_the_lake_and_marts(
    tmp_path: Path,
) -> None:
    config = _setup(tmp_path)
    written = _two_sites(config, DAY, stem="a")
    # a foreign writer's site name is data, never SQL
    odd = _rows(DAY, "node01", "GPU-Q0", "o'brien; drop table x", count=2)
    table = pa.Table.from_pylist(odd, schema=SAMPLE_SCHEMA.with_metadata(file_metadata()))
    folder = config.samples_dir / f"date={DAY}" / "host=odd"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "odd.parquet")

    result = ingest(config, today=NEXT)
    assert result.samples_loaded == 6 + 9 + 4 + 2 and result.quarantined == ()
    compacted = sorted(
        p.relative_to(config.samples_dir).parent.as_posix()
        for p in config.samples_dir.rglob("compacted-*.parquet")
    )
    assert compacted == [
        f"date={DAY}/host=b-gpu2",
        f"date={DAY}/host=node01@siteA",
        f"date={DAY}/host=node01@siteB",
        f"date={DAY}/host=odd",
    ]
    assert build(config).mode == "full"
    # each host-day's file straight into the lake, none in the warehouse file
    assert query(config, "select count(*) from build_state.lake_files") == [(4,)]
    assert query(config, "select count(*) from samples_stored") == [(0,)]
    by_site = query(
        config,
        "select cluster, host, count(*) from samples_attributed group by all order by all",
    )
    assert by_site == [
        ("o'brien; drop table x", "node01", 2),
        ("siteA", "node01", 6),
        ("siteB", "b-gpu2", 4),
        ("siteB", "node01", 9),
    ]
    # the sample's own cluster, NULL where its writer gave none
    assert query(config, "select count(*) from samples where cluster is null") == [(4,)]

    expected = _expected(written)
    host_daily = query(
        config,
        "select cluster, host, gpus, samples, hours_observed from host_daily"
        " where cluster not like 'o%' order by all",
    )
    assert [(c, h, g, s) for c, h, g, s, _ in host_daily] == [
        (site, host, *expected["hosts"][(site, host)][:2])
        for site, host in sorted(expected["hosts"])
    ]
    for site, host, _, _, hours in host_daily:
        assert hours == pytest.approx(expected["hosts"][(site, host)][2])
    team_daily = query(
        config,
        "select cluster, team, gpus, gpu_hours, busy_gpu_hours from team_daily"
        " where cluster not like 'o%' order by all",
    )
    assert [(c, t) for c, t, *_ in team_daily] == sorted(expected["teams"])
    for site, team, gpus, hours, busy in team_daily:
        want = expected["teams"][(site, team)]
        assert gpus == want[0]
        assert hours == pytest.approx(want[1]) and busy == pytest.approx(want[2] / 3600)
    # node01 of the odd site: none of hosts.csv's node01 rows names its site
    assert query(config, "select team from team_daily where cluster like 'o%'") == [
        ("(unallocated)",)
    ]
    # every mart has the column, documented
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        for name in MARTS:
            columns = [row[0] for row in con.execute(f"describe {name}").fetchall()]
            assert "cluster" in columns, name
            comment = con.execute(
                "select comment from duckdb_columns() where table_name = $t"
                " and column_name = 'cluster'",
                {"t": name},
            ).fetchall()
            assert comment and comment[0][0], name


def test_an_edited_compacted_file_of_a_site_host_is_written_again(tmp_path: Path) -> None:
    """A site's host-day arrives in two ingests, so its compacted file (host=node01@siteA)
    is written from its files and its samples stay in the warehouse: an edit of that file
    is undone from them, with the rows of that host at that site alone."""
    config = _setup(tmp_path)
    first = _rows(DAY, "node01", "GPU-A0", "siteA", count=6)
    _write(config, first, "siteA", "a")
    _write(config, _rows(DAY, "node01", "GPU-B0", "siteB", count=5), "siteB", "a")
    ingest(config, today=DAY)
    later = [{**row, "ts": row["ts"] + dt.timedelta(minutes=5)} for row in first]
    _write(config, later, "siteA", "b")
    ingest(config, today=NEXT)
    (compacted,) = config.samples_dir.glob(f"date={DAY}/host=node01@siteA/compacted-*.parquet")
    relative = compacted.relative_to(config.data_dir).as_posix()
    assert query(config, "select count(*) from build_state.lake_files") == [(0,)]
    expected = pq.read_table(compacted)
    assert expected.num_rows == 12
    power = expected.column("power_w").to_pylist()
    power[3] += 1.0
    index = expected.schema.get_field_index("power_w")
    field = expected.schema.field(index)
    pq.write_table(expected.set_column(index, field, pa.array(power, field.type)), compacted)

    result = ingest(config, today=NEXT)

    assert result.quarantined == ()
    (warning,) = [line for line in result.warnings if line.startswith("raw/")]
    assert warning.startswith(f"{relative}: this compacted file changed after it was loaded")
    assert "written again from the warehouse's 12 samples" in warning
    assert pq.read_table(compacted).equals(expected.cast(pq.read_schema(compacted)))


@pytest.mark.parametrize("zones", [{}, ZONES], ids=["one zone", "a zone per site"])
def test_an_incremental_build_with_sites_equals_a_full_one(
    tmp_path: Path, zones: dict[str, Any]
) -> None:
    config = _two_sites_built(tmp_path, **zones)  # built in full
    # the next day: more of every host, node01 of siteB idle long enough to be waste
    _two_sites(config, NEXT, stem="b")
    idle = _rows(NEXT, "node01", "GPU-B0", "siteB", util=0.0, count=200, step_s=10)
    idle = [{**row, "ts": row["ts"] + dt.timedelta(hours=1)} for row in idle]
    _write(config, idle, "siteB", "c")
    ingest(config, today=NEXT)
    assert build(config).mode == "incremental"
    assert_incremental_equals_full(config)
    waste = query(config, "select cluster, host, team, is_waste from idle_episodes")
    assert ("siteB", "node01", "beta", True) in waste


def test_a_hosts_csv_site_change_makes_a_full_build(tmp_path: Path) -> None:
    config = _two_sites_built(tmp_path)
    (config.ref_dir / "hosts.csv").write_text(HOSTS_CSV.replace("b-*,beta,siteB", "b-*,beta,siteC"))
    ingest(config, today=NEXT)
    assert build(config).mode == "full"
    assert query(config, "select distinct cluster from host_daily where host = 'b-gpu2'") == [
        ("siteC",)
    ]


# --- the release before the column ----------------------------------------------------

_CLUSTER = len(V1_1_SCHEMA) - 1
_PREVIOUS = [name for name, _ in SAMPLE_COLUMNS[:_CLUSTER]]


def test_a_warehouse_of_the_previous_release_gains_the_column(tmp_path: Path) -> None:
    """A warehouse whose samples_stored, samples view and lake file have the columns up to
    alloc_user: after an ingest the samples read NULL there, and new files their site."""
    config = _setup(tmp_path)
    config.data_dir.mkdir(exist_ok=True)
    old_rows = _rows(DAY, "node01", "GPU-A0", None)
    old_schema = pa.schema(list(SAMPLE_SCHEMA)[:_CLUSTER]).with_metadata(file_metadata())
    old = pa.Table.from_pylist(
        [{k: v for k, v in row.items() if k != "cluster"} for row in old_rows], schema=old_schema
    )
    lake = config.samples_dir / f"date={DAY}" / "host=node01" / f"compacted-{DAY}.parquet"
    lake.parent.mkdir(parents=True)
    pq.write_table(old, lake)
    relative = lake.relative_to(config.data_dir).as_posix()
    with duckdb.connect(str(config.warehouse_path)) as con:
        ensure_raw_tables(con)
        con.execute("drop view samples")
        for name, _ in SAMPLE_COLUMNS[_CLUSTER:]:
            con.execute(f'alter table samples_stored drop column "{name}"')
        listed = ", ".join(f'"{n}"' for n in _PREVIOUS)
        con.execute(
            f"create view samples as select {listed} from samples_stored union all "
            f"select {listed} from read_parquet(['{lake.absolute()}'])"
        )
        stat = lake.stat()
        con.execute(
            "insert into loaded_files values ($p, $s, $m, 6, null, null, now(), null)",
            {"p": relative, "s": stat.st_size, "m": stat.st_mtime_ns},
        )
        con.execute(
            "insert into build_state.lake_files values ($p, $d, 6, now(), null, 26)",
            {"p": relative, "d": DAY},
        )
    assert query(config, "select count(*) from samples") == [(6,)]
    _write(config, _rows(NEXT, "node01", "GPU-A0", "siteA"), "siteA", "new")
    ingest(config, today=NEXT)
    stored = [row[0] for row in query(config, "describe samples_stored")]
    added = [name for name, _ in SAMPLE_COLUMNS[_CLUSTER:]]
    assert stored[-len(added) :] == added  # after load_id
    assert build(config).mode == "full"
    columns = [row[0] for row in query(config, "select column_name from (describe samples)")]
    assert columns == [name for name, _ in SAMPLE_COLUMNS]
    assert query(config, "select cluster, count(*) from samples group by all order by all") == [
        ("siteA", 6),
        (None, 6),
    ]
    # the old samples' host is siteA's too, by hosts.csv's first node01 row with a site
    assert query(config, "select distinct cluster, host from samples_attributed") == [
        ("siteA", "node01")
    ]


# --- prices per site -------------------------------------------------------------------

PRICES_CSV = (
    "gpu_glob,usd_per_gpu_hour,cluster\n"
    "NVIDIA H100*,2.0,\n"
    "NVIDIA H100*,5.0,siteB\n"
    "NVIDIA A100*,1.0,siteB\n"
)


def test_a_sites_own_price_row_wins_for_its_gpus_in_waste_and_showback(tmp_path: Path) -> None:
    from gpufleet.showback import showback

    config = _setup(tmp_path)
    (config.ref_dir / "prices.csv").write_text(PRICES_CSV)
    # 200 idle samples of 10 s (33 min: waste) at each site, on node01 of both
    written = {
        "siteA": _rows(DAY, "node01", "GPU-A0", "siteA", util=0.0, count=200),
        "siteB": _rows(DAY, "node01", "GPU-B0", "siteB", util=0.0, count=200),
    }
    for site, rows in written.items():
        _write(config, rows, site, "a")
    ingest(config, today=NEXT)
    build(config)
    price = {"siteA": 2.0, "siteB": 5.0}
    episodes = query(
        config, "select cluster, idle_seconds, is_waste, waste_usd from idle_episodes order by 1"
    )
    assert [row[0] for row in episodes] == ["siteA", "siteB"]
    for site, seconds, is_waste, usd in episodes:
        assert is_waste and seconds == sum(r["interval_s"] for r in written[site])
        assert usd == pytest.approx(seconds / 3600 * price[site])
    team = query(config, "select cluster, waste_usd from team_daily order by 1")
    assert [(c, pytest.approx(u)) for c, u in team] == [
        (site, seconds / 3600 * price[site]) for site, seconds, _, _ in episodes
    ]
    frame = showback(config, "2026-11")
    billed = frame.select("x_cluster", "RegionName", "SubAccountName", "ListUnitPrice").rows()
    assert billed == [("siteA", "siteA", "alpha", 2.0), ("siteB", "siteB", "beta", 5.0)]
    for row in frame.iter_rows(named=True):
        assert row["BilledCost"] == pytest.approx(row["ConsumedQuantity"] * price[row["x_cluster"]])


# --- a time zone per site ---------------------------------------------------------------


def test_each_sites_samples_fall_on_the_local_days_and_hours_of_its_own_zone(
    tmp_path: Path,
) -> None:
    config = _setup(tmp_path, **ZONES)
    # from 14:30 UTC for 100 minutes: 23:30-01:10 in Tokyo, 09:30-11:10 in New York,
    # 15:30-17:10 in Berlin (b-gpu2 says no site, and hosts.csv puts it at siteB)
    start = dt.timedelta(hours=5, minutes=30)
    written = {
        "siteA": _rows(DAY, "node01", "GPU-A0", "siteA", count=600),
        "siteB": _rows(DAY, "node01", "GPU-B0", "siteB", count=600),
        "none": _rows(DAY, "odd-host", "GPU-N0", None, count=600),
    }
    for site, rows in written.items():
        moved = [{**row, "ts": row["ts"] + start} for row in rows]
        _write(config, moved, None if site == "none" else site, "a")
    ingest(config, today=NEXT)
    build(config)
    hours = query(
        config,
        "select cluster, day, min(hour), max(hour), count(*) from samples_attributed"
        " group by all order by all",
    )
    assert hours == [
        ("siteA", DAY, 23, 23, 180),
        ("siteA", NEXT, 0, 1, 420),
        ("siteB", DAY, 9, 11, 600),
        (None, DAY, 15, 17, 600),
    ]
    days = query(config, "select cluster, day, gpus from team_daily order by all")
    assert days == [("siteA", DAY, 1), ("siteA", NEXT, 1), ("siteB", DAY, 1), (None, DAY, 1)]
    # a new zone for a site is a full build
    sites = (("siteA", "Asia/Tokyo"), ("siteB", "Asia/Tokyo"))
    config = replace(config, sites=sites)
    assert build(config).mode == "full"
    assert query(
        config, "select count(distinct day) from samples_attributed where cluster = 'siteB'"
    ) == [(2,)]


# --- the report, the analyst API and status ---------------------------------------------


def test_the_report_lists_each_site_sums_a_team_over_its_sites_and_filters_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpufleet.reports.data import load_week
    from gpufleet.reports.weekly import write_report

    config = _setup(tmp_path)
    (config.ref_dir / "hosts.csv").write_text(
        "host_glob,team,cluster\nb-*,shared,siteB\n*,shared,\n"
    )
    written = _two_sites(config, DAY, stem="a")
    odd = _rows(DAY, "x1", "GPU-X0", "<b>x</b>", count=3)
    table = pa.Table.from_pylist(odd, schema=SAMPLE_SCHEMA.with_metadata(file_metadata()))
    folder = config.samples_dir / f"date={DAY}" / "host=x1"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / "odd.parquet")
    ingest(config, today=NEXT)
    build(config)
    hours = {
        site: sum(
            r["interval_s"] for key, rows in written.items() if key.startswith(site) for r in rows
        )
        / 3600
        for site in ("siteA", "siteB")
    }
    week = "2026-W47"
    data = load_week(config, week)
    ((team, gpu_hours, gpus),) = data.teams.select("team", "gpu_hours", "gpus").rows()
    assert (team, gpus) == ("shared", 4)
    assert gpu_hours == pytest.approx(hours["siteA"] + hours["siteB"] + 30 / 3600)
    assert data.sites is not None
    sites = data.sites.select("cluster", "gpu_hours", "gpus").rows()
    assert [(c, g) for c, _, g in sites] == [("<b>x</b>", 1), ("siteA", 1), ("siteB", 2)]
    assert [h for _, h, _ in sites][1:] == [
        pytest.approx(hours["siteA"]),
        pytest.approx(hours["siteB"]),
    ]

    one = load_week(config, week, cluster="siteB")
    assert one.teams.select("team", "gpus").rows() == [("shared", 2)]
    assert one.teams["gpu_hours"].to_list() == [pytest.approx(hours["siteB"])]
    assert one.sites is not None and one.sites["cluster"].to_list() == ["siteB"]
    assert one.totals.gpus_seen == 2

    page = write_report(config, week).page_path.read_text()
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert 'id="sites"' in page
    files = write_report(config, week, cluster="siteB")
    assert files.page_path == config.reports_dir / week / "sites" / "siteB" / "index.html"
    assert "Site siteB only." in files.page_path.read_text()
    assert (
        main(["--data-dir", str(config.data_dir), "report", "--week", week, "--cluster", "siteA"])
        == 0
    )
    assert (config.reports_dir / week / "sites" / "siteA" / "index.html").is_file()
    assert main(["--data-dir", str(config.data_dir), "report", "--cluster", "siteA", "--send"]) == 2
    # a site that is neither configured nor in the warehouse: one line naming those that are
    args = ["--data-dir", str(config.data_dir), "report", "--week", week, "--cluster", "nyc"]
    capsys.readouterr()
    assert main(args) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "gpufleet: error: unknown site 'nyc': the known sites are <b>x</b>, siteA, siteB"
    ]
    assert not (config.reports_dir / week / "sites" / "nyc").exists()


def _table_rows(html: str, css_class: str) -> list[list[str]]:
    """The text of each cell of each row of the page's table of `css_class`."""
    start = html.index(f'<table class="{css_class}">')
    table = html[start : html.index("</table>", start)]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in table.split("<tr>")]
    return [[unescape(cell) for cell in row] for row in rows if row]


def test_the_reports_hosts_and_heatmap_keep_two_sites_hosts_of_one_name_apart(
    tmp_path: Path,
) -> None:
    """node01 at siteA (1 GPU, the second day only) and at siteB (2 GPUs, the first day
    only), and c-gpu1 of no site: by name alone the node01s would be one host with 2 GPUs,
    2 days and no problem."""
    from gpufleet.reports import charts as report_charts
    from gpufleet.reports.data import load_week
    from gpufleet.reports.weekly import write_report

    config = _setup(tmp_path)
    hot = 0x20  # a thermal slowdown in the clocks-event mask
    site_a = _rows(NEXT, "node01", "GPU-A0", "siteA")
    site_b = _rows(DAY, "node01", "GPU-B0", "siteB") + _rows(DAY, "node01", "GPU-B1", "siteB")
    for row in site_a[:3] + site_b[:4] + site_b[6:8]:
        row["clock_event_mask"] = hot
    _write(config, site_a, "siteA", "a")
    _write(config, site_b, "siteB", "a")
    _write(config, _rows(DAY, "c-gpu1", "GPU-C0", None), None, "a")
    ingest(config, today=NEXT + dt.timedelta(days=1))
    build(config)
    week = "2026-W47"

    data = load_week(config, week)
    hosts = data.hosts.select("host", "cluster", "gpus", "days_reporting", "problems").rows()
    assert hosts == [
        ("c-gpu1", None, 1, 1, ["silent at the end of the week", "1 day without data"]),
        ("node01@siteA", "siteA", 1, 1, ["no data at the start of the week", "1 day without data"]),
        ("node01@siteB", "siteB", 2, 1, ["silent at the end of the week", "1 day without data"]),
    ]
    page = write_report(config, week).page_path.read_text()
    shown = [[row[0], row[1], row[2], row[-1]] for row in _table_rows(page, "hosts")]
    assert shown == [
        ["c-gpu1", "1", "1", "silent at the end of the week; 1 day without data"],
        ["node01@siteA", "1", "1", "no data at the start of the week; 1 day without data"],
        ["node01@siteB", "2", "1", "silent at the end of the week; 1 day without data"],
    ]

    # siteB's node01 throttled 6 samples of 10 s on 2 GPUs, siteA's 3 on 1
    hours = data.thermal_hours.select(
        "host", "cluster", "hour_start", "throttled_minutes", "gpus_throttled", "host_rank"
    ).rows()
    nine = T0.time().replace(tzinfo=None)
    assert hours == [
        ("node01@siteB", "siteB", dt.datetime.combine(DAY, nine), 1.0, 2, 1),
        ("node01@siteA", "siteA", dt.datetime.combine(NEXT, nine), 0.5, 1, 2),
    ]
    assert set(data.thermal_hours["hosts_throttled"]) == {2}
    spec = report_charts.thermal_heatmap(data.thermal_hours, data).to_dict()
    assert spec["encoding"]["y"]["sort"] == ["node01@siteB", "node01@siteA"]
    # a report of one site: its hosts keep their site in their label
    one = load_week(config, week, cluster="siteA")
    assert one.hosts["host"].to_list() == ["node01@siteA"]
    assert one.thermal_hours["host"].to_list() == ["node01@siteA"]


def test_the_analyst_api_and_status_know_the_sites(tmp_path: Path) -> None:
    import gpufleet
    from gpufleet.status import read_status

    config = _two_sites_built(tmp_path)
    fleet = gpufleet.open(config.data_dir)
    assert set(fleet.team_daily(cluster="siteB")["cluster"]) == {"siteB"}
    assert fleet.host_daily(cluster="siteA").select("cluster", "host").rows() == [
        ("siteA", "node01")
    ]
    assert len(fleet.host_daily()) == 3
    assert set(fleet.gpu_daily(cluster="siteB")["gpu_uuid"]) == {"GPU-B0", "GPU-B2"}
    for ask in (fleet.team_weekly, fleet.team_daily, fleet.idle_episodes, fleet.jobs):
        with pytest.raises(
            GpufleetError, match=r"^unknown site 'nowhere': the known sites are siteA, siteB$"
        ):
            ask(cluster="nowhere")
    assert fleet.idle_episodes(cluster="siteA").is_empty()
    status = read_status(config, now=dt.datetime.combine(NEXT, dt.time(), tzinfo=dt.UTC))
    assert sorted((h.host, h.cluster) for h in status.hosts) == [
        ("b-gpu2", None),
        ("node01", "siteA"),
        ("node01", "siteB"),
    ]
    assert "siteA" in str(status)


def test_an_idle_notice_names_the_site_of_the_host(tmp_path: Path) -> None:
    from gpufleet.config import NotifyConfig
    from gpufleet.notices.episodes import day_episodes, read_contacts
    from gpufleet.notices.messages import build_notice
    from gpufleet.notices.plan import plan_notices

    config = _setup(tmp_path)
    (config.ref_dir / "users.csv").write_text("user,team,email\nalice,beta,alice@example.com\n")
    process = [{"pid": 7, "user": "alice", "used_mem_bytes": 1 << 30, "job_id": "42"}]
    idle = [
        {**row, "processes": process}
        for row in _rows(DAY, "node01", "GPU-B0", "siteB", util=0.0, count=200)
    ]
    _write(config, idle, "siteB", "a")
    ingest(config, today=NEXT)
    build(config)
    with connect_read_only(config) as con:
        episodes = day_episodes(con, DAY, config.timezone)
        contacts = read_contacts(con)
    assert [(e.host, e.cluster, e.user) for e in episodes] == [("node01", "siteB", "alice")]
    plan = plan_notices(DAY, episodes, contacts, NotifyConfig(min_waste_gpu_hours=0))
    (notice,) = plan.notices
    message = build_notice(notice, config)
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None and "node01 at site siteB GPU 0" in text.get_content()
    assert html is not None and "node01 (siteB)" in html.get_content()
