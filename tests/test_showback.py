"""`gpufleet export showback`: per team, month and GPU model, FOCUS-named, adding up to
team_daily; months are local (Europe/Berlin here, UTC+1 in November)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpufleet.cli import main
from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.showback import month_days, showback
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from tests import notify_fixtures as fx

MONTH = "2026-11"
MYSTERY = "Mystery GPU"  # no price rule matches: price 0
FOCUS = [
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "SubAccountName",
    "ChargeCategory",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingQuantity",
    "PricingUnit",
    "ListUnitPrice",
    "BilledCost",
    "BillingCurrency",
]
MEASURES = {  # showback column: team_daily column
    "ConsumedQuantity": "gpu_hours",
    "x_busy_gpu_hours": "busy_gpu_hours",
    "x_idle_gpu_hours": "idle_gpu_hours",
    "x_waste_gpu_hours": "waste_gpu_hours",
    "x_waste_usd": "waste_usd",
    "x_energy_kwh": "energy_kwh",
}


def at(day: int, hour: int, minute: int = 0, month: int = 11) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, minute, tzinfo=dt.UTC)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """Samples a minute apart across both ends of November in Berlin (23:00 UTC)."""
    busy, idle = fx.BUSY, fx.IDLE
    rows = [
        # Oct 31 21:00 - Nov 1 05:00 local: idle 23:00-00:30 local, across the month's start
        *fx.samples("GPU-h1", "node-a", 0, fx.H100, "alice", "1",
                    [(at(31, 20, month=10), at(31, 22, month=10), busy),
                     (at(31, 22, month=10), at(31, 23, 30, month=10), idle),
                     (at(31, 23, 30, month=10), at(1, 4), busy)]),
        *fx.samples("GPU-a1", "node-a", 1, fx.A100, "alice", "2", [(at(1, 8), at(1, 10), 50.0)]),
        *fx.samples("GPU-x1", "node-b", 1, MYSTERY, "bob", "3", [(at(2, 10), at(2, 11), busy)]),
        # Nov 30 23:00 - Dec 1 02:00 local: idle across the month's end
        *fx.samples("GPU-h2", "node-b", 0, fx.H100, "bob", "4",
                    [(at(30, 22), at(1, 1, month=12), idle)]),
    ]  # fmt: skip
    data_dir = tmp_path / "data"
    fx.write_samples(data_dir, "fleet", rows)
    (data_dir / "ref").mkdir()
    (data_dir / "ref/users.csv").write_text("user,team\nalice,vision\nbob,nlp\n")
    (data_dir / "ref/prices.csv").write_text(fx.PRICES_CSV)
    path = data_dir / "gpufleet.toml"
    path.write_text(f'timezone = "Europe/Berlin"\ndata_dir = "{data_dir}"\n')
    config = load_config(config_path=path)
    ingest(config, compact=False)
    build(config)
    return config


def team_daily_month(config: Config) -> pl.DataFrame:
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        return con.sql(
            "select team, sum(gpu_hours) as gpu_hours, sum(busy_gpu_hours) as busy_gpu_hours,"
            " sum(idle_gpu_hours) as idle_gpu_hours, sum(waste_gpu_hours) as waste_gpu_hours,"
            " sum(waste_usd) as waste_usd, sum(energy_kwh) as energy_kwh from team_daily"
            " where day between date '2026-11-01' and date '2026-11-30' group by team"
        ).pl()


def test_one_row_per_team_and_gpu_model_with_the_price_used(config: Config) -> None:
    frame = showback(config, MONTH)

    assert frame.columns[: len(FOCUS)] == FOCUS
    keys = frame.select("SubAccountName", "x_gpu_name", "ListUnitPrice").rows()
    assert keys == [("nlp", MYSTERY, 0.0), ("nlp", fx.H100, 2.5),
                    ("vision", fx.A100, 1.25), ("vision", fx.H100, 2.5)]  # fmt: skip
    hours = dict(zip(frame["x_gpu_name"] + "/" + frame["SubAccountName"],
                     frame["ConsumedQuantity"], strict=True))  # fmt: skip
    # samples whose ts falls in local November, one minute each
    assert hours == pytest.approx(
        {f"{MYSTERY}/nlp": 1.0, f"{fx.H100}/nlp": 59 / 60, f"{fx.A100}/vision": 2.0,
         f"{fx.H100}/vision": 301 / 60}
    )  # fmt: skip
    waste = dict(zip(frame["x_gpu_name"] + "/" + frame["SubAccountName"],
                     frame["x_waste_gpu_hours"], strict=True))  # fmt: skip
    assert waste[f"{fx.H100}/vision"] == pytest.approx(31 / 60)  # 00:00-00:30 local, Nov 1
    assert waste[f"{fx.H100}/nlp"] == pytest.approx(59 / 60)  # 23:01-23:59 local, Nov 30
    assert frame["BilledCost"].to_list() == pytest.approx(
        (frame["ConsumedQuantity"] * frame["ListUnitPrice"]).to_list()
    )
    assert set(frame["ChargePeriodStart"].to_list()) == {at(31, 23, month=10)}
    assert set(frame["ChargePeriodEnd"].to_list()) == {at(30, 23)}
    assert set(frame["ConsumedUnit"]) == set(frame["PricingUnit"]) == {"GPU-Hours"}
    assert set(frame["BillingCurrency"]) == {"USD"} and set(frame["x_month"]) == {MONTH}


def test_a_teams_rows_add_up_to_its_team_daily_figures_of_the_month(config: Config) -> None:
    frame = showback(config, MONTH)
    sums = frame.group_by("SubAccountName").agg(pl.col(list(MEASURES)).sum())
    expected = team_daily_month(config)
    assert sorted(sums["SubAccountName"]) == sorted(expected["team"]) == ["nlp", "vision"]
    for team in ("nlp", "vision"):
        ours = sums.filter(pl.col("SubAccountName") == team).row(0, named=True)
        theirs = expected.filter(pl.col("team") == team).row(0, named=True)
        for column, daily in MEASURES.items():
            assert ours[column] == pytest.approx(theirs[daily]), (team, column)
    assert frame["x_energy_kwh"].min() > 0


def test_csv_and_parquet_read_back(config: Config, tmp_path: Path, capsys) -> None:
    frame = showback(config, MONTH)
    toml = str(config.source)
    csv_path, parquet_path = tmp_path / "showback.csv", tmp_path / "showback.parquet"

    assert (
        main(["--config", toml, "export", "showback", "--month", MONTH, "-o", str(csv_path)]) == 0
    )
    assert f"{frame.height} rows, 2 teams" in capsys.readouterr().out
    assert main(["--config", toml, "export", "showback", "--month", MONTH, "--parquet",
                 "-o", str(parquet_path)]) == 0  # fmt: skip
    capsys.readouterr()

    assert pl.read_parquet(parquet_path).equals(frame)
    text = csv_path.read_text()
    assert text.startswith(",".join(FOCUS))
    assert "2026-10-31T23:00:00Z,2026-11-30T23:00:00Z,nlp,Usage," in text
    back = pl.read_csv(csv_path, try_parse_dates=True)
    assert back.columns == frame.columns
    for column in ("SubAccountName", "x_gpu_name", "x_gpus"):
        assert back[column].to_list() == frame[column].to_list()
    for column in (*MEASURES, "ListUnitPrice", "BilledCost"):
        assert back[column].to_list() == pytest.approx(frame[column].to_list())

    assert main(["--config", toml, "export", "showback", "--month", MONTH]) == 0
    assert capsys.readouterr().out == text  # CSV on stdout without -o


def test_a_month_without_data_is_a_header(config: Config) -> None:
    frame = showback(config, "2026-09")
    assert frame.height == 0 and frame.columns[: len(FOCUS)] == FOCUS


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--month", "2026-13"], "'2026-13' is not a valid month"),
        (["--month", "11/2026"], "'11/2026' is not a month like 2026-11"),
        (["--month", "2026-11", "--csv", "--parquet"], "not allowed with argument"),
        ([], "the following arguments are required: --month"),
    ],
)
def test_the_command_line_checks_its_arguments(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["export", "showback", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_unknown_format_or_parquet_to_stdout_is_one_error_line(
    config: Config, tmp_path: Path, capsys
) -> None:
    toml = str(config.source)
    for extra, message in (
        (["-o", str(tmp_path / "x.xlsx")], "cannot tell the format from the name"),
        (["--parquet"], "--parquet needs -o FILE"),
    ):
        assert main(["--config", toml, "export", "showback", "--month", MONTH, *extra]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err


def test_month_days_and_no_build(tmp_path: Path) -> None:
    assert month_days("2026-12") == (dt.date(2026, 12, 1), dt.date(2027, 1, 1))
    assert month_days("2028-02") == (dt.date(2028, 2, 1), dt.date(2028, 3, 1))
    with pytest.raises(ValueError, match="not a month"):
        month_days("2026-00")
    config = Config(data_dir=tmp_path)
    ingest(config, compact=False)
    with pytest.raises(GpufleetError, match="no gpu_team_daily yet"):
        showback(config, MONTH)
