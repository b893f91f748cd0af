"""CO2 from energy (#59 item 4): each site's grid intensity, from the configuration
(`grid_gco2_per_kwh`, `[clusters.<site>] grid_gco2_per_kwh`) and the dated rows of
ref/grid.csv, in showback's `x_co2_kg` and the weekly report's teams. Every GPU here draws
500 W for 2 hours a day it is busy: 1 kWh (no energy counter: power x 60 s per sample)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpufleet.close import close, reopen
from gpufleet.config import Config, GridConfig, load_config
from gpufleet.errors import GpufleetError
from gpufleet.kept_showback import ADDED_COLUMNS, CLOSED_SHOWBACK
from gpufleet.reports.data import load_week
from gpufleet.reports.render import PageLink, render_email_text, render_page
from gpufleet.showback import showback
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.publish import write_transaction
from gpufleet.warehouse.refs.grid import read_grid
from tests import notify_fixtures as fx
from tests.templates import made_once

GRID_CSV = "cluster,gco2_per_kwh,valid_from\nsfo,100,2026-11-15\n,300,2026-11-21\n"
CONFIG = "grid_gco2_per_kwh = 50\n[clusters.sfo]\ngrid_gco2_per_kwh = 400\n"
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


def _at(day: int, hour: int) -> dt.datetime:
    return dt.datetime(2026, 11, day, hour, tzinfo=dt.UTC)


def _busy(gpu: str, host: str, user: str, days: tuple[int, ...]) -> list[dict[str, Any]]:
    """2 hours at 500 W (1 kWh) on each of `days`, 10:00-12:00 UTC."""
    return [
        row
        for day in days
        for row in fx.samples(
            gpu, host, 0, fx.H100, user, "1", [(_at(day, 10), _at(day, 12), fx.BUSY)]
        )
    ]


def _write(data_dir: Path, rows: list[dict[str, Any]], site: str | None) -> None:
    """The rows as a collector of `site` writes them (host=<host>@<site>)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["ts"].date().isoformat(), row["host"]), []).append(row)
    for (date, host), group in groups.items():
        folder = f"{host}@{site}" if site else host
        path = data_dir / f"raw/samples/date={date}/host={folder}/fleet.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        schema = fx.SAMPLE_SCHEMA.with_metadata(fx.file_metadata())
        table = pa.Table.from_pylist([{**r, "cluster": site} for r in group], schema=schema)
        pq.write_table(table, path)


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """vision at sfo on Nov 2 and 20, nlp at ber on Nov 2 and 21, ops at no site on Nov 2:
    1 kWh each of those days."""
    data_dir = tmp_path_factory.mktemp("co2") / "data"
    _write(data_dir, _busy("GPU-s", "node-s", "alice", (2, 20)), "sfo")
    _write(data_dir, _busy("GPU-b", "node-b", "bob", (2, 21)), "ber")
    _write(data_dir, _busy("GPU-n", "node-n", "carol", (2,)), None)
    (data_dir / "ref").mkdir()
    (data_dir / "ref/users.csv").write_text("user,team\nalice,vision\nbob,nlp\ncarol,ops\n")
    (data_dir / "ref/grid.csv").write_text(GRID_CSV)
    path = data_dir / "gpufleet.toml"
    path.write_text(f'data_dir = "{data_dir}"\n{CONFIG}')
    config = load_config(config_path=path)
    ingest(config, compact=False, today=dt.date(2026, 12, 2))
    build(config)
    return config


def _co2(frame: Any) -> dict[str, float | None]:
    return dict(zip(frame["SubAccountName"], frame["x_co2_kg"], strict=True))


def test_showback_co2_is_each_days_energy_at_its_sites_intensity_that_day(sites: Config) -> None:
    frame = showback(sites, "2026-11")

    energy = dict(zip(frame["SubAccountName"], frame["x_energy_kwh"], strict=True))
    assert energy == pytest.approx({"nlp": 2.0, "ops": 1.0, "vision": 2.0})
    assert _co2(frame) == pytest.approx(
        {
            # ber: no site value, so every site's: the top-level 50 g on Nov 2, grid.csv's
            # 300 g from Nov 21: 1 kWh x 50 g + 1 kWh x 300 g
            "nlp": 0.35,
            # no site: the top-level 50 g on Nov 2
            "ops": 0.05,
            # sfo: its own 400 g on Nov 2, its grid.csv 100 g from Nov 15 on Nov 20 (the row
            # of every site from Nov 21 does not apply: the site has its own)
            "vision": 0.5,
        }
    )
    assert frame.columns.index("x_co2_kg") == frame.columns.index("x_energy_kwh") + 1


def test_co2_is_null_where_no_intensity_is_known(sites: Config, tmp_path: Path) -> None:
    grid = sites.ref_dir / "grid.csv"
    grid.rename(tmp_path / "grid.csv")
    try:
        only_sfo = dataclasses.replace(sites, grid=GridConfig(sites=(("sfo", 400.0),)))
        frame = showback(only_sfo, "2026-11")
        # vision: 400 g on both days; ber and no site: nothing known, null (not 0)
        assert _co2(frame) == pytest.approx({"nlp": None, "ops": None, "vision": 0.8})
        dated_only = dataclasses.replace(sites, grid=GridConfig())
        grid.write_text("cluster,gco2_per_kwh,valid_from\nsfo,100,2026-11-15\n")
        # vision's Nov 2 has energy but no intensity: the month's sum would understate it
        assert _co2(showback(dated_only, "2026-11"))["vision"] is None
    finally:
        (tmp_path / "grid.csv").replace(grid)


GRID_HEADER = "cluster,gco2_per_kwh,valid_from\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cluster,gco2_per_kwh\nsfo,100\n", "line 1: missing column 'valid_from' in header"),
        (f"{GRID_HEADER}sfo,-1,2026-11-01\n", "line 2: 'gco2_per_kwh' must be a number >= 0"),
        (f"{GRID_HEADER}sfo,lots,2026-11-01\n", "line 2: 'gco2_per_kwh' is not a number"),
        (f"{GRID_HEADER}sfo,100,\n", "line 2: 'valid_from' is empty"),
        (f"{GRID_HEADER}sfo,100,1/11/2026\n", "line 2: 'valid_from' is not an ISO date"),
        (
            f"{GRID_HEADER}sfo,100,2026-11-01\nber,1,2026-11-01\nsfo,90,2026-11-01\n",
            "line 4: site 'sfo' has a row from 2026-11-01 on line 2 already",
        ),
        (
            f"{GRID_HEADER},100,2026-11-01\n,90,2026-11-01\n",
            "line 3: every site has a row from 2026-11-01 on line 2 already",
        ),
    ],
)
def test_a_bad_grid_line_is_one_error_naming_file_and_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "grid.csv"
    path.write_text(text)
    with pytest.raises(GpufleetError) as error:
        read_grid(path)
    assert str(error.value).startswith(f"{path}: {message}")
    assert "\n" not in str(error.value)


def test_a_bad_grid_file_fails_the_showback_with_its_line(sites: Config, tmp_path: Path) -> None:
    broken = tmp_path / "data"
    (broken / "ref").mkdir(parents=True)
    (broken / "ref/grid.csv").write_text("cluster,gco2_per_kwh,valid_from\nsfo,x,2026-11-01\n")
    config = dataclasses.replace(sites, data_dir=broken)
    config.warehouse_path.write_bytes(sites.warehouse_path.read_bytes())
    with pytest.raises(
        GpufleetError, match=r"ref/grid.csv: line 2: 'gco2_per_kwh' is not a number"
    ):
        showback(config, "2026-11")


def test_the_configuration_reads_the_intensities(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.toml"
    path.write_text(
        "grid_gco2_per_kwh = 250.5\n[clusters.sfo]\ngrid_gco2_per_kwh = 0\n"
        '[clusters.ber]\ntimezone = "Europe/Berlin"\ngrid_gco2_per_kwh = 380\n'
    )
    config = load_config(config_path=path)
    assert config.grid == GridConfig(gco2_per_kwh=250.5, sites=(("ber", 380.0), ("sfo", 0.0)))
    assert config.sites == (("ber", "Europe/Berlin"),)  # sfo: a grid value alone, no zone


GRAMS = "must be a number of grams of CO2 per kWh"
SFO = "'clusters.sfo.grid_gco2_per_kwh'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('grid_gco2_per_kwh = "high"\n', f"line 1: 'grid_gco2_per_kwh' {GRAMS}, got 'high'"),
        ("grid_gco2_per_kwh = -3\n", f"line 1: 'grid_gco2_per_kwh' {GRAMS} >= 0, got -3"),
        ("grid_gco2_per_kwh = true\n", f"line 1: 'grid_gco2_per_kwh' {GRAMS}, got True"),
        ("[clusters.sfo]\ngrid_gco2_per_kwh = nan\n", f"line 2: {SFO} {GRAMS} >= 0, got nan"),
        ('[clusters.sfo]\ngrid_gco2_per_kwh = "400"\n', f"line 2: {SFO} {GRAMS} >= 0, got '400'"),
    ],
)
def test_a_bad_intensity_in_the_configuration_is_one_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "gpufleet.toml"
    path.write_text(text)
    with pytest.raises(GpufleetError) as error:
        load_config(config_path=path)
    assert str(error.value) == f"{path}: {message}"


def _week_co2(config: Config, week: str, cluster: str | None = None) -> dict[str, float | None]:
    teams = load_week(config, week, now=NOW, cluster=cluster).teams
    return dict(zip(teams["team"], teams["co2_kg"], strict=True))


def test_the_weekly_report_gives_each_teams_co2_of_the_week(sites: Config) -> None:
    # 2026-W45 (Nov 2-8): sfo's own 400 g, the top-level 50 g at ber and at no site
    assert _week_co2(sites, "2026-W45") == pytest.approx({"vision": 0.4, "nlp": 0.05, "ops": 0.05})
    # 2026-W47 (Nov 16-22): sfo's grid.csv 100 g on Nov 20, every site's 300 g at ber on Nov 21
    assert _week_co2(sites, "2026-W47") == pytest.approx({"vision": 0.1, "nlp": 0.3})
    # one site's report: its teams' CO2 there
    assert _week_co2(sites, "2026-W47", "sfo") == pytest.approx({"vision": 0.1})


def test_the_page_and_the_email_show_kg_co2_per_team(sites: Config) -> None:
    data = load_week(sites, "2026-W47", now=NOW)
    text = render_email_text(data, PageLink(url=None, path="index.html"))
    block = text[text.index("TEAMS, BY IDLE WASTE") :].splitlines()
    assert block[1].split()[-2:] == ["kg", "CO2"]
    assert {line.split()[0]: line.split()[-1] for line in block[2:4]} == {
        "vision": "0.1",
        "nlp": "0.3",
    }
    page = render_page(data, [])
    assert '<th class="num">kg CO₂</th>' in page
    assert '<td class="num">0.3</td>' in page


def test_a_fleet_without_intensities_shows_no_co2_rather_than_zero(sites: Config) -> None:
    grid = sites.ref_dir / "grid.csv"
    text = grid.read_text()
    grid.unlink()
    try:
        data = load_week(dataclasses.replace(sites, grid=GridConfig()), "2026-W47", now=NOW)
    finally:
        grid.write_text(text)
    assert data.teams["co2_kg"].to_list() == [None, None]
    text = render_email_text(data, PageLink(url=None, path="index.html"))
    team_lines = text[text.index("TEAMS, BY IDLE WASTE") :].splitlines()[2:4]
    assert sorted(line.split()[0] for line in team_lines) == ["nlp", "vision"]
    assert [line.split()[-1] for line in team_lines] == ["–", "–"]


def _closed(sites: Config, tmp_path: Path) -> Config:
    """The fleet with November closed (as of Dec 2), in a data directory of the test's own:
    a copy of one closed once per test process (tests/templates.py)."""

    def fill(folder: Path) -> None:
        shutil.copytree(sites.data_dir, folder, dirs_exist_ok=True)
        close(dataclasses.replace(sites, data_dir=folder), "2026-11", today=dt.date(2026, 12, 2))

    config = dataclasses.replace(sites, data_dir=tmp_path / "data")
    made_once("test_co2._closed", fill, config.data_dir)
    return config


def test_a_closed_month_keeps_the_co2_it_had_at_close(sites: Config, tmp_path: Path) -> None:
    config = _closed(sites, tmp_path)
    (config.ref_dir / "grid.csv").write_text("cluster,gco2_per_kwh,valid_from\n,1000,2026-11-01\n")
    kept = showback(config, "2026-11")
    assert _co2(kept) == pytest.approx({"nlp": 0.35, "ops": 0.05, "vision": 0.5})
    reopen(config, "2026-11", today=dt.date(2026, 12, 2))
    # reopened: computed again: 1,000 g at ber and at no site; sfo has its own 400 g (and no
    # grid.csv row of its own any more) on both days
    assert _co2(showback(config, "2026-11")) == pytest.approx(
        {"nlp": 2.0, "ops": 1.0, "vision": 0.8}
    )


def _as_if_closed_before_co2(config: Config) -> None:
    """The kept rows as an older gpufleet left them, then the column added as the next close
    adds it."""
    with write_transaction(config) as con:
        con.execute(f"alter table {CLOSED_SHOWBACK} drop column x_co2_kg")
        con.execute(
            f"alter table {CLOSED_SHOWBACK} add column x_co2_kg {ADDED_COLUMNS['x_co2_kg']}"
        )


def test_a_month_closed_before_x_co2_kg_is_written_as_it_was(sites: Config, tmp_path: Path) -> None:
    config = _closed(sites, tmp_path)
    today = dt.date(2026, 12, 2)
    kept = showback(config, "2026-11")
    _as_if_closed_before_co2(config)
    old = showback(config, "2026-11")
    assert old.equals(kept.drop("x_co2_kg"))
    # one site closed before: its rows' CO2 is not known, the others' computed
    reopen(config, "2026-11", today=today)
    close(config, "2026-11", cluster="sfo", today=today)
    _as_if_closed_before_co2(config)
    assert _co2(showback(config, "2026-11")) == pytest.approx(
        {"nlp": 0.35, "ops": 0.05, "vision": None}
    )
    # then the whole month: sfo's rows keep theirs, unknown
    close(config, "2026-11", today=today)
    frame = showback(config, "2026-11")
    assert _co2(frame) == pytest.approx({"nlp": 0.35, "ops": 0.05, "vision": None})
    assert frame.columns == kept.columns
