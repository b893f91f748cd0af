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
from gpufleet.showback import export_showback, month_days, showback
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from tests import notify_fixtures as fx

pytestmark = pytest.mark.fleet

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


@pytest.fixture(scope="module")
def november_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    """Samples a minute apart across both ends of November in Berlin (23:00 UTC), ingested
    and built once: the tests only read them."""
    tmp_path = tmp_path_factory.mktemp("november")
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
    # As on 2026-12-02: its samples of December 1 are not in the future then.
    ingest(config, compact=False, today=dt.date(2026, 12, 2))
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


def test_one_row_per_team_and_gpu_model_with_the_price_used(november_config: Config) -> None:
    frame = showback(november_config, MONTH)

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


def test_a_teams_rows_add_up_to_its_team_daily_figures_of_the_month(
    november_config: Config,
) -> None:
    frame = showback(november_config, MONTH)
    sums = frame.group_by("SubAccountName").agg(pl.col(list(MEASURES)).sum())
    expected = team_daily_month(november_config)
    assert sorted(sums["SubAccountName"]) == sorted(expected["team"]) == ["nlp", "vision"]
    for team in ("nlp", "vision"):
        ours = sums.filter(pl.col("SubAccountName") == team).row(0, named=True)
        theirs = expected.filter(pl.col("team") == team).row(0, named=True)
        for column, daily in MEASURES.items():
            assert ours[column] == pytest.approx(theirs[daily]), (team, column)
    assert frame["x_energy_kwh"].min() > 0


def test_csv_and_parquet_read_back(november_config: Config, tmp_path: Path, capsys) -> None:
    frame = showback(november_config, MONTH)
    toml = str(november_config.source)
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
        cents = 0.005 if column in ("BilledCost", "x_waste_usd") else 1e-12  # money in cents
        assert back[column].to_list() == pytest.approx(frame[column].to_list(), abs=cents)

    assert main(["--config", toml, "export", "showback", "--month", MONTH]) == 0
    assert capsys.readouterr().out == text  # CSV on stdout without -o


def test_a_month_without_data_is_a_header(november_config: Config) -> None:
    frame = showback(november_config, "2026-09")
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
    november_config: Config, tmp_path: Path, capsys
) -> None:
    toml = str(november_config.source)
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


# --- what finance opens in a spreadsheet -------------------------------------------------

# Names a spreadsheet would run as a formula if a CSV cell began with them (OWASP's
# CSV injection list: = + - @, tab, carriage return).
FORMULA_TEAMS = {"alice": '=HYPERLINK("http://x","y")', "bob": "@SUM(A1:A9)"}
FORMULA_GPU = "+cmd|' /C calc'!A0"


@pytest.fixture
def formula_config(tmp_path: Path) -> Config:
    """Two teams and a GPU model named like spreadsheet formulas, a day of November each."""
    rows = [
        *fx.samples("GPU-f1", "node-a", 0, FORMULA_GPU, "alice", "1",
                    [(at(2, 8), at(2, 10), 50.0)]),
        *fx.samples("GPU-f2", "node-b", 0, fx.H100, "bob", "2", [(at(3, 8), at(3, 9), 50.0)]),
    ]  # fmt: skip
    data_dir = tmp_path / "formulas"
    fx.write_samples(data_dir, "fleet", rows)
    (data_dir / "ref").mkdir()
    users = "".join(
        f'{user},"{team.replace(chr(34), 2 * chr(34))}"\n' for user, team in FORMULA_TEAMS.items()
    )
    (data_dir / "ref/users.csv").write_text("user,team\n" + users)
    (data_dir / "ref/prices.csv").write_text(fx.PRICES_CSV)
    path = data_dir / "gpufleet.toml"
    path.write_text(f'timezone = "Europe/Berlin"\ndata_dir = "{data_dir}"\n')
    config = load_config(config_path=path)
    ingest(config, compact=False)
    build(config)
    return config


def test_csv_cells_that_a_spreadsheet_would_run_are_text_parquet_is_exact(
    formula_config: Config, tmp_path: Path, capsys
) -> None:
    toml = str(formula_config.source)
    csv_path, parquet_path = tmp_path / "showback.csv", tmp_path / "showback.parquet"
    for path in (csv_path, parquet_path):
        assert (
            main(["--config", toml, "export", "showback", "--month", MONTH, "-o", str(path)]) == 0
        )

    exact = pl.read_parquet(parquet_path)
    assert sorted(exact["SubAccountName"]) == sorted(FORMULA_TEAMS.values())
    assert set(exact["x_gpu_name"]) == {FORMULA_GPU, fx.H100}

    text = csv_path.read_text()
    assert '"\'=HYPERLINK(""http://x"",""y"")"' in text
    back = pl.read_csv(csv_path, infer_schema=False)
    assert sorted(back["SubAccountName"]) == sorted("'" + t for t in FORMULA_TEAMS.values())
    assert set(back["x_gpu_name"]) == {"'" + FORMULA_GPU, fx.H100}
    for line in text.splitlines():
        assert not any(cell.startswith(("=", "+", "-", "@")) for cell in line.split(","))


def test_csv_costs_are_in_cents_parquet_exact(
    november_config: Config, tmp_path: Path, capsys
) -> None:
    toml = str(november_config.source)
    csv_path, parquet_path = tmp_path / "showback.csv", tmp_path / "showback.parquet"
    for path in (csv_path, parquet_path):
        argv = ["--config", toml, "export", "showback", "--month", MONTH, "-o", str(path)]
        assert main(argv) == 0
    exact = pl.read_parquet(parquet_path)
    back = pl.read_csv(csv_path, infer_schema=False)
    vision_h100 = (pl.col("SubAccountName") == "vision") & (pl.col("x_gpu_name") == fx.H100)
    # 301 minutes of H100 at $2.50: $12.541666... exact in Parquet, $12.54 in the CSV
    assert exact.filter(vision_h100)["BilledCost"].item() == pytest.approx(301 / 60 * 2.5)
    assert back.filter(vision_h100)["BilledCost"].item() == "12.54"
    for column in ("BilledCost", "x_waste_usd"):
        for cell in back[column]:
            assert len(cell.partition(".")[2]) <= 2, (column, cell)
        assert back[column].cast(pl.Float64).to_list() == pytest.approx(
            exact[column].to_list(), abs=0.005
        )
    assert exact["BilledCost"].round(2).to_list() != exact["BilledCost"].to_list()


def test_a_month_the_warehouse_does_not_cover_is_flagged(
    november_config: Config, tmp_path: Path, capsys
) -> None:
    """The samples run from Oct 31 20:01 UTC to Dec 1 01:00 UTC: November is covered,
    October only from its last evening, December only to its first night."""
    november = showback(november_config, MONTH)
    assert set(november["x_is_partial_month"]) == {False}
    assert set(november["x_coverage_start"]) == {at(31, 23, month=10)}  # the month's start
    assert set(november["x_coverage_end"]) == {at(30, 23)}  # the month's end

    december = showback(november_config, "2026-12")
    assert december.height == 1 and december["x_is_partial_month"].item() is True
    assert december["x_coverage_start"].item() == at(30, 23)
    assert december["x_coverage_end"].item() == at(1, 1, month=12)  # the last sample
    october = showback(november_config, "2026-10")
    assert october["x_coverage_start"].item() == at(31, 20, 1, month=10)  # the first sample
    assert october["x_coverage_end"].item() == at(31, 23, month=10)

    toml = str(november_config.source)
    csv_path = tmp_path / "december.csv"
    argv = ["--config", toml, "export", "showback", "--month", "2026-12", "-o", str(csv_path)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpufleet: warning: ")
    assert "2026-12 is not complete: the warehouse has samples up to 2026-12-01 02:00" in err
    line = pl.read_csv(csv_path, infer_schema=False).row(0, named=True)
    assert (line["x_coverage_end"], line["x_is_partial_month"]) == ("2026-12-01T01:00:00Z", "true")

    assert (
        main(["--config", toml, "export", "showback", "--month", MONTH, "-o", str(csv_path)]) == 0
    )
    assert capsys.readouterr().err == ""  # a complete month: no warning


def test_the_idle_capacity_of_unallocated_gpus_is_a_cost_column_of_its_own(
    tmp_path: Path, capsys
) -> None:
    """A GPU no allocation, process or hosts.csv row gives a team is `(unallocated)`: its 2
    idle hours at $2.50 are $5.00 of idle capacity (OpenCost's idle bucket), in
    x_idle_capacity_usd of its row and 0 on the others, never in a team's waste."""
    idle_gpu = fx.samples("GPU-u1", "node-c", 0, fx.H100, "-", "-", [(at(4, 8), at(4, 10), 1.0)])
    rows = [
        *[{**row, "processes": []} for row in idle_gpu],
        *fx.samples("GPU-h1", "node-a", 0, fx.H100, "alice", "1", [(at(4, 8), at(4, 9), 90.0)]),
    ]
    data_dir = tmp_path / "data"
    fx.write_samples(data_dir, "fleet", rows)
    (data_dir / "ref").mkdir()
    (data_dir / "ref/users.csv").write_text("user,team\nalice,vision\n")
    (data_dir / "ref/prices.csv").write_text(fx.PRICES_CSV)
    path = data_dir / "gpufleet.toml"
    path.write_text(f'timezone = "Europe/Berlin"\ndata_dir = "{data_dir}"\n')
    config = load_config(config_path=path)
    ingest(config, compact=False)
    build(config)

    frame = showback(config, MONTH)
    by_team = {row["SubAccountName"]: row for row in frame.iter_rows(named=True)}
    assert sorted(by_team) == ["(unallocated)", "vision"]
    idle = by_team["(unallocated)"]
    assert (idle["ConsumedQuantity"], idle["BilledCost"]) == pytest.approx((2.0, 5.0))
    assert idle["x_idle_capacity_usd"] == pytest.approx(5.0)
    assert (idle["x_waste_gpu_hours"], idle["x_waste_usd"]) == (0.0, 0.0)
    assert by_team["vision"]["x_idle_capacity_usd"] == 0.0
    assert by_team["vision"]["BilledCost"] == pytest.approx(2.5)
    # the marts price the same hours: team_daily.cost_usd of (unallocated)
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        costs = dict(
            con.execute("select team, sum(cost_usd) from team_daily group by team").fetchall()
        )
    assert costs == pytest.approx({"(unallocated)": 5.0, "vision": 2.5})
    # in the CSV, in cents, after x_waste_usd
    output = tmp_path / "showback.csv"
    assert (
        main(["--config", str(path), "export", "showback", "--month", MONTH, "-o", str(output)])
        == 0
    )
    header = output.read_text().splitlines()[0].split(",")
    assert header.index("x_idle_capacity_usd") == header.index("x_waste_usd") + 1
    csv = pl.read_csv(output)
    assert (
        csv.filter(pl.col("SubAccountName") == "(unallocated)")["x_idle_capacity_usd"].item() == 5.0
    )


def test_a_month_closed_before_x_idle_capacity_usd_is_written_as_it_was(tmp_path: Path) -> None:
    """Its kept rows have no x_idle_capacity_usd (closed by an older gpufleet): the export
    writes them without it, byte for byte as at close, and the CSV's cents still round."""
    from gpufleet.close import close
    from gpufleet.warehouse.publish import write_transaction
    from tests.test_close import TODAY, _warehouse

    config = _warehouse(tmp_path)
    close(config, "2026-10", today=TODAY)
    kept = showback(config, "2026-10")
    assert "x_idle_capacity_usd" in kept.columns  # closed now: kept with the column
    with write_transaction(config) as con:
        con.execute("alter table build_state.closed_showback drop column x_idle_capacity_usd")
    old = showback(config, "2026-10")
    assert old.columns == [c for c in kept.columns if c != "x_idle_capacity_usd"]
    assert old.equals(kept.drop("x_idle_capacity_usd"))
    output = tmp_path / "october.csv"
    export_showback(config, "2026-10", output=output)
    assert "x_idle_capacity_usd" not in output.read_text().splitlines()[0]
