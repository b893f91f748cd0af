"""docs/reference.md#definitions, series rules: contiguity, idle episodes, waste, thermal
events, energy."""

from __future__ import annotations

import pytest

from tests.test_models_fixtures import H100, Fleet, at, built_once, proc

pytestmark = pytest.mark.fleet

EPISODES = (
    "select start_ts, end_ts, idle_seconds, samples, is_waste, held_memory, waste_usd, "
    'team, "user", job_id, attributed_by from idle_episodes where gpu_uuid = ? order by start_ts'
)


def _default_rules_cases() -> Fleet:
    """The cases built with the default rules (threshold 5 %, 30 minutes, gap factor 2.5) and
    no price rule, each on a host and GPUs of its own (and, where it reads team_daily, a team
    of its own), in one fleet built once (`built_once`): a build is some 0.5 CPU s."""
    fleet = Fleet()
    fleet.user("alice", "ml")
    fleet.user("bob", "nlp")
    fleet.user("bea", "ml")
    for fill in (_contiguity, _breaks, _held, _thermal, _overlap, _energy, _null, _duplicates):
        fill(fleet)
    fleet.build()
    return fleet


def _cases() -> Fleet:
    return built_once("test_models_series._default_rules_cases", _default_rules_cases)


def _contiguity(fleet: Fleet) -> None:
    fleet.host_rule(1, "contig", "infra-contig")
    # interval 10 s, factor 2.5 -> contiguous while b.ts - a.ts <= 25 s.
    # 10 -> 20 (10 s), 20 -> 40 (20 s: one missed tick), 40 -> 70 (30 s: a gap).
    for seconds in (10, 20, 40, 70):
        fleet.sample(at(seconds), host="contig", gpu_uuid="GPU-contig", gpu_util_pct=0.0)


def test_contiguity_tolerates_one_missed_tick_and_splits_on_two() -> None:
    fleet = _cases()
    episodes = fleet.rows(EPISODES, ["GPU-contig"])
    assert [(e["start_ts"], e["end_ts"], e["idle_seconds"], e["samples"]) for e in episodes] == [
        (at(0), at(40), 30.0, 3),  # start = 10 - 10
        (at(60), at(70), 10.0, 1),
    ]
    contiguous = fleet.rows(
        "select is_contiguous from samples_attributed where gpu_uuid = 'GPU-contig' order by ts"
    )
    assert [r["is_contiguous"] for r in contiguous] == [False, True, True, False]


def _breaks(fleet: Fleet) -> None:
    # 10, 20 idle by alice; 30 busy; 40 idle alice; 50 idle bob (another team) -> 3 episodes
    on = {"host": "breaks", "gpu_uuid": "GPU-breaks"}
    fleet.sample(at(10), gpu_util_pct=0.0, processes=[proc(1, "alice", 1)], **on)
    fleet.sample(at(20), gpu_util_pct=4.9, processes=[proc(1, "alice", 1)], **on)
    fleet.sample(at(30), gpu_util_pct=5.0, processes=[proc(1, "alice", 1)], **on)  # not < 5
    fleet.sample(at(40), gpu_util_pct=1.0, processes=[proc(1, "alice", 1)], **on)
    fleet.sample(at(50), gpu_util_pct=1.0, processes=[proc(2, "bob", 1)], **on)


def test_idle_episode_breaks_on_busy_sample_and_on_team_change() -> None:
    fleet = _cases()  # alice in ml, bob in nlp
    episodes = fleet.rows(EPISODES, ["GPU-breaks"])
    assert [(e["start_ts"], e["samples"], e["team"]) for e in episodes] == [
        (at(0), 2, "ml"),
        (at(30), 1, "ml"),
        (at(40), 1, "nlp"),
    ]


def test_waste_at_exactly_min_minutes_and_not_just_below_with_prices() -> None:
    fleet = Fleet(min_minutes=30)
    fleet.price_rule(1, "NVIDIA H100*", 3.6)
    fleet.price_rule(2, "NVIDIA H?00 80GB HBM3", 99.0)  # matches too, but comes second
    fleet.host_rule(1, "*", "infra")
    # 180 idle samples of 10 s = 1800 s = exactly 30 min -> waste
    fleet.series(at(10), 180, gpu_uuid="GPU-A", gpu_index=0, gpu_util_pct=0.0)
    # 179 samples = 1790 s -> not waste
    fleet.series(at(10), 179, gpu_uuid="GPU-B", gpu_index=1, gpu_util_pct=0.0)
    # waste, but no price rule matches "Tesla T4" -> price 0
    fleet.series(at(10), 180, gpu_uuid="GPU-C", gpu_index=2, gpu_util_pct=0.0, gpu_name="Tesla T4")
    fleet.build()
    a, b, c = (fleet.one(EPISODES, [gpu]) for gpu in ("GPU-A", "GPU-B", "GPU-C"))
    assert (a["idle_seconds"], a["is_waste"]) == (1800.0, True)
    assert a["waste_usd"] == pytest.approx(1.8)  # 1800 / 3600 * 3.6
    assert (b["idle_seconds"], b["is_waste"], b["waste_usd"]) == (1790.0, False, 0.0)
    assert (c["is_waste"], c["waste_usd"]) == (True, 0.0)
    day = fleet.one("select * from team_daily where team = 'infra'")
    # waste hours: A 0.5 h + C 0.5 h; waste_usd: A 0.5 h * 3.6 + C 0.5 h * 0
    assert day["waste_gpu_hours"] == pytest.approx(1.0)
    assert day["waste_usd"] == pytest.approx(1.8)
    # idle hours: (180 + 179 + 180) * 10 s
    assert day["idle_gpu_hours"] == pytest.approx(5390 / 3600)


def test_waste_requires_attribution() -> None:
    fleet = Fleet(min_minutes=30)
    fleet.price_rule(1, "*", 2.0)
    fleet.series(at(10), 360, gpu_util_pct=0.0)  # one hour idle, attributed to nobody
    fleet.build()
    episode = fleet.one(EPISODES, ["GPU-A"])
    assert (episode["attributed_by"], episode["team"]) == ("none", "(unallocated)")
    assert (episode["idle_seconds"], episode["is_waste"], episode["waste_usd"]) == (
        3600.0,
        False,
        0.0,
    )
    day = fleet.one("select waste_gpu_hours, idle_gpu_hours from team_daily")
    assert day == {"waste_gpu_hours": 0.0, "idle_gpu_hours": 1.0}


def _held(fleet: Fleet) -> None:
    # Episode 1, by process: alice's job first, then bea's, same team -> one episode,
    # user and job_id of the first sample.
    on = {"host": "held", "gpu_uuid": "GPU-held-A"}
    fleet.sample(at(10), gpu_util_pct=0.0, processes=[proc(1, "alice", 5, "ja")], **on)
    fleet.sample(at(20), gpu_util_pct=0.0, processes=[proc(2, "bea", 5, "jb")], **on)
    # Episode 2 on GPU-B, by allocation: only the middle sample has a process.
    fleet.allocation(
        job_id="j9",
        user="carol",
        team="ops",
        start_ts=at(0),
        end_ts=None,
        host="held",
        gpu_index=1,
    )
    gpu_b: dict[str, object] = {"host": "held", "gpu_uuid": "GPU-held-B", "gpu_index": 1}
    fleet.sample(at(10), gpu_util_pct=0.0, **gpu_b)
    fleet.sample(at(20), gpu_util_pct=0.0, processes=[proc(3, "x", 1)], **gpu_b)
    fleet.sample(at(30), gpu_util_pct=0.0, **gpu_b)
    # Episode 3 on GPU-C, by allocation, no process at all.
    fleet.allocation(
        job_id="j8",
        user="carol",
        team="ops",
        start_ts=at(0),
        end_ts=None,
        host="held",
        gpu_index=2,
    )
    fleet.sample(at(10), host="held", gpu_uuid="GPU-held-C", gpu_index=2, gpu_util_pct=0.0)


def test_held_memory_and_user_of_the_first_sample() -> None:
    fleet = _cases()  # alice and bea in ml
    first = fleet.one(EPISODES, ["GPU-held-A"])
    assert (first["user"], first["job_id"], first["samples"], first["held_memory"]) == (
        "alice",
        "ja",
        2,
        True,
    )
    second = fleet.one(EPISODES, ["GPU-held-B"])
    assert (second["user"], second["job_id"], second["samples"], second["held_memory"]) == (
        "carol",
        "j9",
        3,
        True,
    )
    assert fleet.one(EPISODES, ["GPU-held-C"])["held_memory"] is False
    # samples_attributed shows the facts samples_attributed_rows packs into `flags`
    flags = fleet.rows(
        "select gpu_uuid, is_idle, has_process, is_contiguous, starts_idle_episode, "
        "starts_thermal_event from samples_attributed where host = 'held' order by gpu_uuid, ts"
    )
    assert [tuple(row.values())[1:] for row in flags] == [
        (True, True, False, True, False),  # GPU-A at 10
        (True, True, True, False, False),
        (True, False, False, True, False),  # GPU-B at 10
        (True, True, True, False, False),
        (True, False, True, False, False),
        (True, False, False, True, False),  # GPU-C at 10
    ]


def _thermal(fleet: Fleet) -> None:
    # The allocation starts at 45: the sample at 40 is unallocated, 50 is "ml".
    fleet.allocation(
        job_id="j", user="alice", team="ml", start_ts=at(45), end_ts=None, host="thermal"
    )
    thermal = [
        (10, 0x20, 80, 1500),
        (20, 0x40 | 0x04, 85, 1200),
        (30, 0x04, 70, 1900),  # power cap only: not thermal, ends event 1
        (40, 0x20, 81, 1600),
        (50, 0x20, 83, 1400),
        (80, 0x20 | 0x01, 79, 1700),  # 30 s after 50 > 25 s: a gap, event 3
    ]
    for seconds, mask, temp, clock in thermal:
        fleet.sample(
            at(seconds),
            host="thermal",
            gpu_uuid="GPU-thermal",
            clock_event_mask=mask,
            temp_gpu_c=temp,
            sm_clock_mhz=clock,
        )


def test_thermal_events_break_on_cool_sample_and_gap() -> None:
    fleet = _cases()
    events = fleet.rows(
        "select start_ts, end_ts, duration_s, samples, max_temp_gpu_c, min_sm_clock_mhz, "
        "reasons_mask, is_hw, team from thermal_events where gpu_uuid = 'GPU-thermal' "
        "order by start_ts"
    )
    assert [e["team"] for e in events] == ["(unallocated)", "(unallocated)", "ml"]
    assert [(e["start_ts"], e["end_ts"], e["duration_s"], e["samples"]) for e in events] == [
        (at(0), at(20), 20.0, 2),
        (at(30), at(50), 20.0, 2),
        (at(70), at(80), 10.0, 1),
    ]
    assert [(e["max_temp_gpu_c"], e["min_sm_clock_mhz"]) for e in events] == [
        (85, 1200),
        (83, 1400),
        (79, 1700),
    ]
    assert [(e["reasons_mask"], e["is_hw"]) for e in events] == [
        (0x64, True),  # 0x20 | 0x44
        (0x20, False),
        (0x21, False),
    ]
    daily = fleet.one("select thermal_seconds from gpu_daily where gpu_uuid = 'GPU-thermal'")
    assert daily["thermal_seconds"] == 50.0  # 5 thermal samples of 10 s
    flags = fleet.rows(
        "select is_thermal, starts_thermal_event, starts_idle_episode "
        "from samples_attributed where gpu_uuid = 'GPU-thermal' order by ts"
    )
    assert [(r["is_thermal"], r["starts_thermal_event"]) for r in flags] == [
        (True, True),
        (True, False),
        (False, False),
        (True, True),
        (True, False),
        (True, True),
    ]
    assert not any(r["starts_idle_episode"] for r in flags)  # 50 % busy: no idle episode


def _overlap(fleet: Fleet) -> None:
    fleet.host_rule(2, "overlap", "infra-overlap")
    # GPU-A: idle from 10 to 60, throttled from 30 to 80: a thermal event starts inside an
    # idle episode. GPU-B the other way round: an idle episode starts inside a thermal event.
    for seconds in range(10, 90, 10):
        early, late = seconds <= 60, seconds >= 30
        fleet.sample(
            at(seconds),
            host="overlap",
            gpu_uuid="GPU-overlap-A",
            gpu_util_pct=0.0 if early else 90.0,
            clock_event_mask=0x20 if late else 0,
        )
        fleet.sample(
            at(seconds),
            host="overlap",
            gpu_uuid="GPU-overlap-B",
            gpu_index=1,
            gpu_util_pct=0.0 if late else 90.0,
            clock_event_mask=0x20 if early else 0,
        )


def test_idle_and_thermal_runs_that_overlap_keep_their_own_starts() -> None:
    fleet = _cases()
    runs = "select start_ts, end_ts, samples from {} where gpu_uuid = ? order by start_ts"
    for gpu, idle, thermal in (
        ("GPU-overlap-A", (0, 60), (20, 80)),
        ("GPU-overlap-B", (20, 80), (0, 60)),
    ):
        episodes = fleet.rows(runs.format("idle_episodes"), [gpu])
        events = fleet.rows(runs.format("thermal_events"), [gpu])
        assert [(e["start_ts"], e["end_ts"], e["samples"]) for e in episodes] == [
            (at(idle[0]), at(idle[1]), 6)
        ]
        assert [(e["start_ts"], e["end_ts"], e["samples"]) for e in events] == [
            (at(thermal[0]), at(thermal[1]), 6)
        ]


ENERGY_READINGS = [
    # seconds, energy_mj, power_w, expected energy_j
    (10, 1_000_000, 100.0, 1000.0),  # no previous sample: power 100 W * 10 s
    (20, 1_002_000, 100.0, 2.0),  # counter delta 2000 mJ
    (30, 500, 100.0, 1000.0),  # counter reset (negative delta): power
    (40, None, 50.0, 500.0),  # no counter: power 50 W * 10 s
    (50, 10_000, None, None),  # previous counter missing and no power: unknown
    (60, 13_000, None, 3.0),  # delta 3000 mJ
    (90, 20_000, 200.0, 2000.0),  # 30 s gap: not contiguous, power 200 W * 10 s
]


def _energy(fleet: Fleet) -> None:
    for seconds, energy_mj, power_w, _ in ENERGY_READINGS:
        fleet.sample(
            at(seconds),
            host="energy",
            gpu_uuid="GPU-energy",
            energy_mj=energy_mj,
            power_w=power_w,
        )


def test_energy_counter_delta_reset_fallback_and_missing() -> None:
    fleet = _cases()
    energy = fleet.rows(
        "select energy_j from samples_attributed where gpu_uuid = 'GPU-energy' order by ts"
    )
    assert [r["energy_j"] for r in energy] == [r[3] for r in ENERGY_READINGS]
    daily = fleet.one("select energy_kwh from gpu_daily where gpu_uuid = 'GPU-energy'")
    # 1000 + 2 + 1000 + 500 + 3 + 2000 = 4505 J
    assert daily["energy_kwh"] == pytest.approx(4505 / 3.6e6)


def _null(fleet: Fleet) -> None:
    fleet.host_rule(3, "null-util", "infra")  # the only host of team infra
    on = {"host": "null-util", "gpu_uuid": "GPU-null"}
    fleet.sample(at(10), gpu_util_pct=50.0, **on)
    fleet.sample(at(20), gpu_util_pct=0.0, **on)
    fleet.sample(at(30), gpu_util_pct=None, status="lost", **on)
    fleet.sample(at(40), gpu_util_pct=0.0, **on)


def test_null_utilization_is_neither_idle_nor_busy() -> None:
    fleet = _cases()
    flags = fleet.rows(
        "select is_idle from samples_attributed where gpu_uuid = 'GPU-null' order by ts"
    )
    assert [r["is_idle"] for r in flags] == [False, True, None, True]
    # The null sample ends the idle run: two episodes of one sample each.
    assert [e["samples"] for e in fleet.rows(EPISODES, ["GPU-null"])] == [1, 1]
    day = fleet.one("select * from team_daily where team = 'infra'")
    assert day["gpu_hours"] == pytest.approx(40 / 3600)  # all four samples count
    assert day["busy_gpu_hours"] == pytest.approx(5 / 3600)  # 0.5 * 10 s + 0 + 0
    assert day["measured_gpu_hours"] == pytest.approx(30 / 3600)  # the null one left out
    assert day["avg_util_pct"] == pytest.approx(100 * 5 / 30)
    assert day["idle_gpu_hours"] == pytest.approx(20 / 3600)


def _duplicates(fleet: Fleet) -> None:
    on = {"host": "dup", "gpu_uuid": "GPU-dup"}
    fleet.sample(at(10), gpu_util_pct=0.0, **on)
    fleet.sample(at(10), gpu_util_pct=0.0, **on)
    fleet.sample(at(20), gpu_util_pct=0.0, **on)


def test_duplicate_samples_count_once() -> None:
    fleet = _cases()
    counted = "select count(*) as n from samples_attributed where gpu_uuid = 'GPU-dup'"
    assert fleet.one(counted)["n"] == 2
    daily = fleet.one("select hours_observed from gpu_daily where gpu_uuid = 'GPU-dup'")
    assert daily["hours_observed"] == pytest.approx(20 / 3600)
    assert fleet.one(EPISODES, ["GPU-dup"])["samples"] == 2


def test_gpu_name_price_uses_the_first_matching_glob() -> None:
    fleet = Fleet(min_minutes=1)
    fleet.price_rule(1, "NVIDIA A100*", 1.0)
    fleet.price_rule(2, "*H100*", 2.0)
    fleet.price_rule(3, "*", 5.0)
    fleet.host_rule(1, "*", "infra")
    fleet.series(at(10), 36, gpu_util_pct=0.0, gpu_name=H100)  # 360 s idle = 0.1 h
    fleet.build()
    assert fleet.one(EPISODES, ["GPU-A"])["waste_usd"] == pytest.approx(0.2)  # 0.1 h * 2.0
