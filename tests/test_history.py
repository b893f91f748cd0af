"""History that stays put (issue 42, item 3): users.csv, hosts.csv and prices.csv rows with
a `valid_from` date apply from that local day on, earlier days keep what they had, and an
edit of dated rows rebuilds only from the earliest day it changes
(docs/reference.md#valid-from, docs/warehouse.md#incremental-builds).

The fleet is tests/test_incremental.py's (Asia/Kolkata, two days from 2026-11-15 12:00
UTC: local days 2026-11-15 to 2026-11-17).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.warehouse.build import build_models
from gpufleet.warehouse.refs.read import read_hosts, read_prices, read_users
from tests.test_incremental import MARTS, SAMPLES_PER_GPU, _arrive, _fleet, assert_same_marts
from tests.test_models_fixtures import Fleet, built_once

pytestmark = pytest.mark.fleet

MOVE_DAY = dt.date(2026, 11, 16)  # alice moves from ml to vision
PRICE_DAY = dt.date(2026, 11, 17)  # a Tuesday: the H100 price goes from 2.5 to 4.0
DATED_SQL = f"""
insert into ref_users_dated values ('alice', 'vision', date '{MOVE_DAY}');
insert into ref_hosts_dated (rule_order, host_glob, team, valid_from)
values (3, 'node-c*', 'ops', date '{PRICE_DAY}');
insert into ref_prices_dated (rule_order, gpu_glob, usd_per_gpu_hour, valid_from)
values (4, '*H100*', 4.0, date '{PRICE_DAY}');
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_valid_from_is_read_per_row(tmp_path: Path) -> None:
    users = read_users(
        _write(
            tmp_path / "users.csv",
            "user,team,valid_from,email\nalice,ml,,a@example.org\nalice,vision,2026-11-16,\n",
        )
    )
    assert [(u.user, u.team, u.valid_from, u.email) for u in users] == [
        ("alice", "ml", None, "a@example.org"),
        ("alice", "vision", MOVE_DAY, None),
    ]
    hosts = read_hosts(_write(tmp_path / "hosts.csv", "host_glob,team,valid_from\nn*,a,\n"))
    assert hosts[0].valid_from is None
    prices = read_prices(
        _write(tmp_path / "prices.csv", "gpu_glob,usd_per_gpu_hour,valid_from\n*,1,2026-01-01\n")
    )
    assert prices[0].valid_from == dt.date(2026, 1, 1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("user,team,valid_from\nalice,ml,16.11.2026\n", "line 2: 'valid_from' is not an ISO"),
        ("user,team,valid_from\nalice,ml,2026-02-30\n", "line 2: 'valid_from' is not an ISO"),
        (
            "user,team,valid_from\nalice,ml,2026-11-16\nalice,cv,2026-11-16\n",
            "line 3: user 'alice' is mapped to team 'cv' from 2026-11-16 but line 2",
        ),
    ],
)
def test_a_bad_valid_from_names_file_and_line(tmp_path: Path, text: str, problem: str) -> None:
    path = _write(tmp_path / "users.csv", text)
    with pytest.raises(GpufleetError, match=problem) as caught:
        read_users(path, "ref/users.csv")
    assert str(caught.value).startswith("ref/users.csv: line")
    assert "\n" not in str(caught.value)


def _built(dated: bool) -> Fleet:
    """The fleet with every sample (and the dated rows), built in full: a copy of one built
    once per test process (tests/test_models_fixtures.py's built_once)."""

    def make() -> Fleet:
        fleet = _fleet()
        _arrive(fleet.con, 0, SAMPLES_PER_GPU * 10, "true")
        if dated:
            fleet.con.execute(DATED_SQL)
        assert build_models(fleet.con, fleet.config).mode == "full"
        return fleet

    return built_once(f"test_history._built(dated={dated})", make)


@pytest.fixture(scope="module")
def edited() -> tuple[Fleet, Fleet, Fleet, str]:
    """Built without dated rows (`before`), then the dated rows added and built again
    (`after`, and the mode that build ran in); and a full build with them from the start."""
    before = _built(dated=False)
    after = _built(dated=False)
    after.con.execute(DATED_SQL)
    mode = build_models(after.con, after.config).mode
    return before, after, _built(dated=True), mode


def test_a_dated_edit_is_not_a_full_build_and_equals_one(
    edited: tuple[Fleet, Fleet, Fleet, str],
) -> None:
    _, after, full, mode = edited
    assert mode == "incremental"
    assert_same_marts(after.con, full.con, MARTS)
    assert build_models(after.con, after.config).mode == "up to date"


def test_a_user_who_moves_keeps_the_old_team_before_the_move(
    edited: tuple[Fleet, Fleet, Fleet, str],
) -> None:
    _, after, _, _ = edited
    rows = after.con.execute(
        """
        select day >= $move as moved, list(distinct team order by team)
        from samples_attributed
        where "user" = 'alice' and attributed_by = 'process' and job_id in ('j0', 'j3', 'j5')
        group by all order by all
        """,
        {"move": MOVE_DAY},
    ).fetchall()
    assert rows == [(False, ["ml"]), (True, ["vision"])]
    hosts = after.con.execute(
        """
        select day >= $day as dated, list(distinct team order by team)
        from samples_attributed where attributed_by = 'host'
        group by all order by all
        """,
        {"day": PRICE_DAY},
    ).fetchall()
    assert hosts == [(False, ["infra"]), (True, ["ops"])]


def test_a_price_change_mid_week_changes_waste_usd_from_its_day_on(
    edited: tuple[Fleet, Fleet, Fleet, str],
) -> None:
    before, after, _, _ = edited
    query = """
        select day, sum(waste_usd), sum(waste_s) from gpu_team_daily
        where gpu_name like '%H100%' group by day order by day
    """
    old = before.con.execute(query).fetchall()
    new = after.con.execute(query).fetchall()
    assert [day for day, _, _ in old] == [day for day, _, _ in new]
    for (day, old_usd, old_s), (_, new_usd, new_s) in zip(old, new, strict=True):
        if day < PRICE_DAY:
            assert new_usd == pytest.approx(old_usd)
        else:
            assert new_s == pytest.approx(old_s) and new_s > 0
            assert new_usd == pytest.approx(old_usd * 4.0 / 2.5)
    weekly = after.con.execute("select sum(waste_usd) from team_weekly").fetchone()
    daily = after.con.execute("select sum(waste_usd) from team_daily").fetchone()
    assert weekly is not None and daily is not None
    assert weekly[0] == pytest.approx(daily[0])


def test_an_edit_of_an_undated_row_is_still_a_full_build() -> None:
    fleet = _built(dated=True)
    fleet.con.execute("update ref_prices set usd_per_gpu_hour = 3.0 where rule_order = 1")
    assert build_models(fleet.con, fleet.config).mode == "full"
    # a dated row added between undated ones renumbers them: still incremental
    fleet.con.execute(
        "update ref_prices set rule_order = rule_order + 10;"
        "insert into ref_prices_dated (rule_order, gpu_glob, usd_per_gpu_hour, valid_from)"
        " values (5, 'NVIDIA A100*', 9.0, date '2026-11-17')"
    )
    assert build_models(fleet.con, fleet.config).mode == "incremental"
