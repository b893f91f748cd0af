"""An idle notice lists a job's waste episodes on one GPU in the day as one line, with their
total and how many episodes it holds (gpufleet.notices.episodes.notice_lines)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpufleet.config import Config
from gpufleet.notices.episodes import WasteEpisode, notice_lines
from gpufleet.notices.idle import DRY_RUN, notify_idle
from gpufleet.notices.messages import build_notice, clock, hours, usd
from gpufleet.notices.plan import USER, Notice
from gpufleet.warehouse.build import build
from gpufleet.warehouse.ingest import ingest
from tests import notify_fixtures as fx


def _episode(
    gpu: str, job: str | None, start: dt.datetime, minutes: int, **more: Any
) -> WasteEpisode:
    """One of alice's episodes on node-a's GPU `gpu` (its last character the index)."""
    episode = WasteEpisode(
        episode_id=hash((gpu, start)),
        gpu_uuid=gpu,
        host="node-a",
        gpu_index=int(gpu[-1]),
        gpu_name=fx.H100,
        team="vision",
        user="alice",
        job_id=job,
        start_ts=start,
        end_ts=start + dt.timedelta(minutes=minutes),
        idle_seconds=minutes * 60.0,
        waste_usd=minutes / 60 * 2.5,
        held_memory=False,
        is_open=False,
        is_sent=False,
    )
    return replace(episode, **more)


def test_a_jobs_episodes_on_one_gpu_are_one_line_with_their_sums() -> None:
    nine = fx.at(fx.DAY, 9)
    episodes = [
        _episode("GPU-0", "7", nine, 40),
        _episode("GPU-1", "7", nine, 30),  # the same job on another GPU: a line of its own
        _episode("GPU-0", "7", nine + dt.timedelta(minutes=52), 43, held_memory=True),
        _episode("GPU-0", "8", nine + dt.timedelta(hours=3), 35),  # another job on the GPU
        _episode("GPU-0", "7", nine + dt.timedelta(minutes=102), 38, is_open=True),
    ]
    lines = notice_lines(episodes)
    assert [(line.gpu_index, line.job_id, line.episode_count) for line in lines] == [
        (0, "7", 3),
        (1, "7", 1),
        (0, "8", 1),
    ]
    first = lines[0]
    assert (first.start_ts, first.end_ts) == (nine, nine + dt.timedelta(minutes=140))
    assert first.gpu_hours == pytest.approx((40 + 43 + 38) / 60)
    assert first.waste_usd == pytest.approx((40 + 43 + 38) / 60 * 2.5)
    assert first.held_memory and first.is_open  # any episode held memory; the last is open
    assert sum(line.gpu_hours for line in lines) == pytest.approx(186 / 60)


def test_the_notice_shows_one_line_per_job_and_gpu_with_the_episodes_count(
    config: Config,
) -> None:
    nine = fx.at(fx.DAY, 9)
    episodes = tuple(
        _episode("GPU-0", "7", nine + dt.timedelta(minutes=offset), 30)
        for offset in (0, 37, 89, 141, 193, 245, 297)  # 7 episodes, 7-22 minutes apart
    )
    notice = Notice(
        kind=USER,
        day=fx.DAY,
        to="alice@example.org",
        cc=(),
        user="alice",
        team=None,
        episodes=episodes,
    )
    message = build_notice(notice, config)
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = message.get_body(("html",)).get_content()  # type: ignore[union-attr]
    listed = [line for line in text.splitlines() if line.startswith("- ")]
    assert listed == [
        f"- node-a GPU 0 ({fx.H100}), job 7: 7 idle episodes from {clock(nine)} to "
        f"{clock(nine + dt.timedelta(minutes=327))}: {hours(3.5)} GPU-hours in all, "
        f"{usd(3.5 * 2.5)}"
    ]
    assert f"Total: {hours(3.5)} GPU-hours, {usd(3.5 * 2.5)}." in text
    assert len(re.findall(r"<td>node-a</td>", html)) == 1
    assert '<td style="text-align: right;">7</td>' in html


def test_a_split_idle_job_is_one_line_in_the_sent_notice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the warehouse: a GPU whose job goes idle three times in the morning, busy for
    12 and 7 minutes between, is one line of alice's notice, the run still counting 3
    episodes."""
    d = fx.DAY
    config = fx.write_config(tmp_path, notify="min_waste_gpu_hours = 0\n")
    fx.write_refs(tmp_path)
    phases = [
        (fx.at(d, 8), fx.at(d, 9), fx.BUSY),
        (fx.at(d, 9), fx.at(d, 9, 40), fx.IDLE),
        (fx.at(d, 9, 40), fx.at(d, 9, 52), fx.BUSY),
        (fx.at(d, 9, 52), fx.at(d, 10, 35), fx.IDLE),
        (fx.at(d, 10, 35), fx.at(d, 10, 42), fx.BUSY),
        (fx.at(d, 10, 42), fx.at(d, 11, 20), fx.IDLE),
        (fx.at(d, 11, 20), fx.at(d, 12), fx.BUSY),
    ]
    fx.write_samples(
        tmp_path, "split", fx.samples("GPU-m0", "node-m", 0, fx.H100, "alice", "777", phases)
    )
    ingest(config, compact=False)
    build(config)

    run = notify_idle(config, day=d, mode=DRY_RUN)

    (notice,) = run.plan.notices
    assert len(notice.episodes) == 3  # each still recorded as sent on its own
    (preview,) = run.previews
    listed = [line for line in preview.splitlines() if line.startswith("- ")]
    idle_hours = (40 + 43 + 38) / 60
    assert listed == [
        f"- node-m GPU 0 ({fx.H100}), job 777: 3 idle episodes from 2026-11-16 09:00 to "
        f"2026-11-16 11:20: {hours(idle_hours)} GPU-hours in all, {usd(idle_hours * 2.5)}; "
        "memory still allocated"
    ]
    assert "user alice: 3 episodes" in str(run)


def test_a_line_break_in_a_name_stays_inside_its_line_of_the_text(config: Config) -> None:
    nine = fx.at(fx.DAY, 9)
    episode = replace(_episode("GPU-0", "7\nTotal: 0 GPU-hours", nine, 45), host="node-a\r\nx")
    notice = Notice(
        kind=USER,
        day=fx.DAY,
        to="alice@example.org",
        cc=(),
        user="alice\nmallory",
        team=None,
        episodes=(episode,),
    )
    text = build_notice(notice, config).get_body(("plain",)).get_content()  # type: ignore[union-attr]
    assert "Hello alice\\nmallory," in text
    [listed] = [line for line in text.splitlines() if line.startswith("- ")]
    assert listed.startswith("- node-a\\r\\nx GPU 0") and "job 7\\nTotal: 0 GPU-hours:" in listed
    assert not any(line.startswith("Total: 0 GPU-hours") for line in text.splitlines())
