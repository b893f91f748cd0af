"""The shared fixtures' copies (tests/templates.py, test_models_fixtures.built_once): made
once, each copy a test's own, and a copy that a test cannot tell from what was made."""

from __future__ import annotations

import os
from pathlib import Path

from tests.templates import made_once
from tests.test_models_fixtures import T0, Fleet, at, built_once

CHANGED_NS = 1_700_000_000_123_456_789


def test_a_folder_is_made_once_and_each_copy_keeps_hard_links_and_times(tmp_path: Path) -> None:
    made: list[Path] = []

    def fill(folder: Path) -> None:
        made.append(folder)
        (folder / "warehouse").write_text("rows")
        os.link(folder / "warehouse", folder / "slot")  # as the warehouse file and its slot
        (folder / "raw").mkdir()
        (folder / "raw" / "a.parquet").write_text("samples")
        os.utime(folder / "raw" / "a.parquet", ns=(CHANGED_NS, CHANGED_NS))

    one = made_once("test_templates.folder", fill, tmp_path / "one")
    two = made_once("test_templates.folder", fill, tmp_path / "two")
    assert len(made) == 1 and one == tmp_path / "one"
    for copy in (one, two):
        assert (copy / "slot").stat().st_ino == (copy / "warehouse").stat().st_ino
        assert (copy / "warehouse").stat().st_ino != (made[0] / "warehouse").stat().st_ino
        assert (copy / "raw" / "a.parquet").stat().st_mtime_ns == CHANGED_NS
    (one / "warehouse").write_text("changed")
    assert (two / "slot").read_text() == "rows" and (made[0] / "slot").read_text() == "rows"


def test_a_fleet_is_built_once_and_each_copy_is_its_own() -> None:
    built: list[Fleet] = []

    def make() -> Fleet:
        fleet = Fleet(timezone="Asia/Kolkata", min_minutes=1.0)
        fleet.series(T0, 30, gpu_util_pct=0.0)
        fleet.build()
        built.append(fleet)
        return fleet

    one = built_once("test_templates.fleet", make)
    two = built_once("test_templates.fleet", make)
    assert len(built) == 1
    assert one.config.timezone == "Asia/Kolkata" and one.config.idle.min_minutes == 1.0
    assert one.config.data_dir != two.config.data_dir
    episodes = "select count(*) as n from idle_episodes"
    assert one.one(episodes) == two.one(episodes) == {"n": 1}
    assert one.build().mode == "up to date"  # the build state came along
    one.con.execute("delete from samples_stored")
    one.sample(at(3600), gpu_util_pct=0.0)
    assert two.one("select count(*) as n from samples_stored") == {"n": 30}
