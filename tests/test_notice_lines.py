"""An idle notice lists a job's waste episodes of the day that overlap in time, or are on one
GPU, as one line, with their GPUs summed up, their total, how many episodes it holds and what
frees the GPUs under the job's scheduler (gpufleet.notices.episodes.notice_lines,
gpufleet.schedulers)."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpufleet.config import Config
from gpufleet.episode_groups import counted, gpu_summary, span
from gpufleet.notices.episodes import WasteEpisode, notice_lines
from gpufleet.notices.idle import DRY_RUN, notify_idle
from gpufleet.notices.messages import build_notice, clock, hours, usd
from gpufleet.notices.plan import TEAM_LEAD, USER, Notice
from gpufleet.schedulers import Scheduler, advice, end_command, job_label, scheduler_of
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


def test_a_jobs_episodes_on_one_gpu_or_overlapping_are_one_line_with_their_sums() -> None:
    nine = fx.at(fx.DAY, 9)
    episodes = [
        _episode("GPU-0", "7", nine, 40),
        _episode("GPU-1", "7", nine, 30),  # the same job on another GPU at the same time
        _episode("GPU-0", "7", nine + dt.timedelta(minutes=52), 43, held_memory=True),
        _episode("GPU-0", "8", nine + dt.timedelta(hours=3), 35),  # another job on the GPU
        _episode("GPU-0", "7", nine + dt.timedelta(minutes=102), 38, is_open=True),
        # the job again in the evening, on a GPU of its own: another line
        _episode("GPU-2", "7", nine + dt.timedelta(hours=9), 45),
    ]
    lines = notice_lines(episodes)
    assert [(line.gpus(), line.job_id, line.episode_count) for line in lines] == [
        ("node-a GPUs 0-1", "7", 4),
        ("node-a GPU 0", "8", 1),
        ("node-a GPU 2", "7", 1),
    ]
    first = lines[0]
    assert first.gpu_count == 2
    assert (first.start_ts, first.end_ts) == (nine, nine + dt.timedelta(minutes=140))
    assert first.gpu_hours == pytest.approx((40 + 30 + 43 + 38) / 60)
    assert first.waste_usd == pytest.approx((40 + 30 + 43 + 38) / 60 * 2.5)
    assert first.held_memory and first.is_open  # any episode held memory; one is open
    assert sum(line.gpu_hours for line in lines) == pytest.approx(231 / 60)


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
        f"- job 7 on node-a GPU 0 ({fx.H100}): 1 GPU idle in 7 episodes between {clock(nine)} "
        f"and {clock(nine + dt.timedelta(minutes=327))}: {hours(3.5)} GPU-hours in all, "
        f"{usd(3.5 * 2.5)}"
    ]
    assert f"Total: {hours(3.5)} GPU-hours, {usd(3.5 * 2.5)}." in text
    assert len(re.findall(r"<td>node-a GPU 0 ", html)) == 1
    assert '<td style="text-align: right;">7</td>' in html  # the episodes
    # job 7 came from an allocation file of no known scheduler: no command to guess
    assert "  What to do: end the job through its scheduler, or release its allocation" in text
    assert "scancel" not in text and "kubectl" not in text


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
        f"- job 777 on node-m GPU 0 ({fx.H100}): 1 GPU idle in 3 episodes between "
        f"2026-11-16 09:00 and 2026-11-16 11:20: {hours(idle_hours)} GPU-hours in all, "
        f"{usd(idle_hours * 2.5)}; memory still allocated"
    ]
    # a process's job id is its Slurm job's (docs/reference.md, processes.job_id)
    assert "  What to do: end the job if it no longer needs them: scancel 777" in preview
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
    assert listed.startswith("- job 7\\nTotal: 0 GPU-hours on node-a\\r\\nx GPU 0 (")
    assert not any(line.startswith("Total: 0 GPU-hours") for line in text.splitlines())


def _lead_notice(episodes: tuple[WasteEpisode, ...]) -> Notice:
    return Notice(
        kind=TEAM_LEAD,
        day=fx.DAY,
        to="nlp-lead@example.org",
        cc=(),
        user=None,
        team="nlp",
        episodes=episodes,
    )


def test_an_8_gpu_slurm_job_and_a_pod_are_one_line_each_with_their_schedulers_command(
    config: Config,
) -> None:
    nine = fx.at(fx.DAY, 9)
    slurm_job = tuple(
        _episode(f"GPU-{index}", "4807074", nine, 360, host="node12", user="bob", team="nlp",
                 attributed_by="allocation", is_slurm_job=True)
        for index in range(8)
    )  # fmt: skip
    pod = _episode("GPU-0", "ml-serving/llm-0", nine, 240, host="node-e", user=None,
                   team="nlp", attributed_by="allocation")  # fmt: skip
    message = build_notice(_lead_notice((*slurm_job, pod)), config)
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = message.get_body(("html",)).get_content()  # type: ignore[union-attr]

    listed = [line for line in text.splitlines() if line.startswith("- ")]
    end, pod_end = clock(nine + dt.timedelta(hours=6)), clock(nine + dt.timedelta(hours=4))
    assert listed == [
        f"- job 4807074 on node12 GPUs 0-7 ({fx.H100}): 8 GPUs idle 6 h, from {clock(nine)} "
        f"to {end}: {hours(48)} GPU-hours in all, {usd(48 * 2.5)}",
        f"- pod ml-serving/llm-0 on node-e GPU 0 ({fx.H100}): 1 GPU idle 4 h, from "
        f"{clock(nine)} to {pod_end}: {hours(4)} GPU-hours, {usd(4 * 2.5)}",
    ]
    advice = [line for line in text.splitlines() if line.startswith("  What to do: ")]
    assert advice == [
        "  What to do: end the job if it no longer needs them: scancel 4807074",
        "  What to do: delete the pod if it no longer needs them: "
        "kubectl delete pod llm-0 -n ml-serving",
    ]
    assert "User bob:" in text and "User (no user known):" in text
    assert "for at least 30 minutes) on 2026-11-16" in text
    assert not re.search(r"\b1 (GPUs|episodes|minutes)\b", text)
    # the HTML part: one row each, with the same advice
    assert html.count("<td>job 4807074</td>") == 1 and html.count("<td>pod ml-serving/llm-0")
    assert "node12 GPUs 0-7" in html and "scancel 4807074" in html
    assert "kubectl delete pod llm-0 -n ml-serving" in html
    assert len(re.findall(r"<tr style=\"border-bottom: 1px", html)) == 2


def test_episodes_without_a_job_are_one_line_per_user_and_host() -> None:
    nine = fx.at(fx.DAY, 9)
    episodes = [
        _episode("GPU-0", None, nine, 60, attributed_by="process"),
        _episode("GPU-1", None, nine + dt.timedelta(minutes=20), 60, attributed_by="process"),
        _episode("GPU-0", None, nine, 60, host="node-b", attributed_by="process"),
    ]
    lines = notice_lines(episodes)
    assert [(line.job, line.gpus()) for line in lines] == [
        ("no job", "node-a GPUs 0-1"),
        ("no job", "node-b GPU 0"),
    ]
    assert lines[0].idle_for == "1 h 20 min"
    assert lines[0].advice.startswith("stop the processes that hold them")


@pytest.mark.parametrize(
    ("job_id", "attributed_by", "is_slurm_job", "scheduler", "command"),
    [
        ("4807074", "allocation", True, Scheduler.SLURM, "scancel 4807074"),
        ("4242_7", "process", False, Scheduler.SLURM, "scancel 4242_7"),
        ("ml-serving/llm-0", "allocation", False, Scheduler.KUBERNETES,
         "kubectl delete pod llm-0 -n ml-serving"),
        ("k8s:0f1e2d3c-aaaa-bbbb-cccc-123456789abc", "process", False, Scheduler.KUBERNETES,
         None),
        ("pbs.1234", "allocation", False, Scheduler.OTHER, None),
        ("Team X/Run 1", "allocation", False, Scheduler.OTHER, None),  # not a pod's name
        # a job id that is not one word stays one word in the command
        ("1; rm -rf ~", "process", False, Scheduler.SLURM, "scancel '1; rm -rf ~'"),
        (None, "process", False, Scheduler.NONE, None),
    ],
)  # fmt: skip
def test_the_scheduler_of_a_job_and_the_command_that_ends_it(
    job_id: str | None,
    attributed_by: str,
    is_slurm_job: bool,
    scheduler: Scheduler,
    command: str | None,
) -> None:
    found = scheduler_of(job_id, attributed_by=attributed_by, is_slurm_job=is_slurm_job)
    assert found == scheduler
    assert end_command(job_id, found) == command
    if command is not None:
        assert advice(job_id, found).endswith(f": {command}")
    if job_id is not None and job_id.startswith("k8s:"):
        assert job_label(job_id, found) == f"pod with UID {job_id[4:]}"
        assert advice(job_id, found).endswith(f"| grep {job_id[4:]}")


def test_gpus_and_counts_are_worded_for_one_and_for_many() -> None:
    assert [counted(1, "GPU"), counted(8, "GPU"), counted(1, "episode")] == [
        "1 GPU",
        "8 GPUs",
        "1 episode",
    ]
    gpus = [("node12", index) for index in range(8)] + [("node13", 0), ("node13", 2)]
    assert gpu_summary(gpus) == "node12 GPUs 0-7; node13 GPUs 0, 2"
    many = [(f"node{host}", 0) for host in range(5)]
    assert gpu_summary(many) == "node0 GPU 0; node1 GPU 0; node2 GPU 0; 2 GPUs on 2 more hosts"
    assert gpu_summary([*many[:4], ("node4", 0)], max_hosts=4).endswith("; 1 GPU on 1 more host")
    assert [span(40 * 60), span(6 * 3600), span(8400), span(60 * 3600)] == [
        "40 min",
        "6 h",
        "2 h 20 min",
        "2.5 days",
    ]
