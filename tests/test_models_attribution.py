"""docs/reference.md#attribution: allocation > process > host > none."""

from __future__ import annotations

import pytest

from tests.test_models_fixtures import Fleet, at, proc

pytestmark = pytest.mark.fleet

ATTRIBUTION = (
    'select attributed_by, team, "user", job_id from samples_attributed '
    "where gpu_uuid = ? and ts = ?"
)


def attribution(fleet: Fleet, gpu_uuid: str, seconds: float) -> tuple:
    row = fleet.one(ATTRIBUTION, [gpu_uuid, at(seconds)])
    return (row["attributed_by"], row["team"], row["user"], row["job_id"])


def test_allocation_beats_process_and_host() -> None:
    fleet = Fleet()
    fleet.host_rule(1, "node*", "infra")
    fleet.user("bob", "nlp")
    fleet.allocation(job_id="j1", user="alice", team="ml", start_ts=at(0), end_ts=None)
    fleet.sample(at(10), processes=[proc(7, "bob", 100, "p7")])
    fleet.build()
    assert attribution(fleet, "GPU-A", 10) == ("allocation", "ml", "alice", "j1")


def test_overlapping_allocations_latest_start_wins_while_it_covers() -> None:
    fleet = Fleet()
    # A: (0, open); B: (600, 1200]. Both cover 900: B started later and wins.
    # At 1500 B has ended, so A (the only one still covering) applies again.
    fleet.allocation(job_id="A", user="alice", team="ml", start_ts=at(0), end_ts=None)
    fleet.allocation(job_id="B", user="bob", team="nlp", start_ts=at(600), end_ts=at(1200))
    for seconds in (300, 900, 1200, 1500):
        fleet.sample(at(seconds))
    fleet.build()
    assert attribution(fleet, "GPU-A", 300) == ("allocation", "ml", "alice", "A")
    assert attribution(fleet, "GPU-A", 900) == ("allocation", "nlp", "bob", "B")
    assert attribution(fleet, "GPU-A", 1200) == ("allocation", "nlp", "bob", "B")
    assert attribution(fleet, "GPU-A", 1500) == ("allocation", "ml", "alice", "A")


def test_allocation_boundaries_exclude_start_include_end() -> None:
    fleet = Fleet()
    # start_ts < ts <= end_ts with start = 100, end = 120
    fleet.allocation(job_id="j", user="alice", team="ml", start_ts=at(100), end_ts=at(120))
    for seconds in (100, 110, 120, 130):
        fleet.sample(at(seconds))
    fleet.build()
    assert attribution(fleet, "GPU-A", 100) == ("none", "(unallocated)", None, None)
    assert attribution(fleet, "GPU-A", 110)[0] == "allocation"
    assert attribution(fleet, "GPU-A", 120)[0] == "allocation"
    assert attribution(fleet, "GPU-A", 130) == ("none", "(unallocated)", None, None)


def test_allocation_must_match_host_and_gpu_index() -> None:
    fleet = Fleet()
    fleet.allocation(job_id="j", user="alice", team="ml", start_ts=at(0), end_ts=None, gpu_index=1)
    fleet.sample(at(10), gpu_uuid="GPU-A", gpu_index=0)
    fleet.sample(at(10), gpu_uuid="GPU-B", gpu_index=1)
    fleet.sample(at(10), gpu_uuid="GPU-C", gpu_index=1, host="node2")
    fleet.build()
    assert attribution(fleet, "GPU-A", 10)[0] == "none"
    assert attribution(fleet, "GPU-B", 10) == ("allocation", "ml", "alice", "j")
    assert attribution(fleet, "GPU-C", 10)[0] == "none"


def test_open_allocation_covers_everything_after_its_start() -> None:
    fleet = Fleet()
    fleet.allocation(job_id="j", user="alice", team="ml", start_ts=at(0), end_ts=None)
    fleet.sample(at(30 * 86400))  # thirty days later
    fleet.build()
    assert attribution(fleet, "GPU-A", 30 * 86400) == ("allocation", "ml", "alice", "j")


def test_allocation_team_then_users_csv_then_unmapped() -> None:
    fleet = Fleet()
    fleet.user("alice", "vision")
    fleet.user("carol", "vision")
    # Its own team wins over users.csv; an empty team looks the user up; else (unmapped).
    fleet.allocation(job_id="j0", user="carol", team="ml", start_ts=at(0), end_ts=None)
    fleet.allocation(job_id="j1", user="alice", team=None, start_ts=at(0), end_ts=None, gpu_index=1)
    fleet.allocation(job_id="j2", user="zed", team=None, start_ts=at(0), end_ts=None, gpu_index=2)
    for index in range(3):
        fleet.sample(at(10), gpu_uuid=f"GPU-{index}", gpu_index=index)
    fleet.build()
    assert attribution(fleet, "GPU-0", 10) == ("allocation", "ml", "carol", "j0")
    assert attribution(fleet, "GPU-1", 10) == ("allocation", "vision", "alice", "j1")
    assert attribution(fleet, "GPU-2", 10) == ("allocation", "(unmapped)", "zed", "j2")


def test_process_with_most_memory_ties_to_lowest_pid() -> None:
    fleet = Fleet()
    fleet.user("carol", "vision")
    fleet.user("bob", "nlp")
    fleet.host_rule(1, "*", "infra")  # a host rule ranks below a process
    # bob and carol both hold 100 bytes; carol's pid 10 < bob's pid 20; dave holds less.
    fleet.sample(
        at(10),
        processes=[proc(20, "bob", 100, "jb"), proc(10, "carol", 100, "jc"), proc(5, "dave", 50)],
    )
    # an owner missing from users.csv
    fleet.sample(at(10), gpu_uuid="GPU-B", gpu_index=1, processes=[proc(3, "zed", 1, "jz")])
    fleet.build()
    assert attribution(fleet, "GPU-A", 10) == ("process", "vision", "carol", "jc")
    assert attribution(fleet, "GPU-B", 10) == ("process", "(unmapped)", "zed", "jz")


def test_host_glob_first_match_in_file_order() -> None:
    fleet = Fleet()
    fleet.host_rule(1, "n_de", "literal")  # `_` is not a wildcard: matches only "n_de"
    fleet.host_rule(2, "gpu-a*", "alpha")
    fleet.host_rule(3, "gpu-?1", "one")
    fleet.host_rule(4, "*", "rest")
    hosts = {"gpu-a1": "alpha", "gpu-b1": "one", "node": "rest", "n_de": "literal"}
    for index, host in enumerate(hosts):
        fleet.sample(at(10), gpu_uuid=f"GPU-{index}", host=host)
    fleet.build()
    for index, (host, team) in enumerate(hosts.items()):
        assert attribution(fleet, f"GPU-{index}", 10) == ("host", team, None, None), host


def test_no_rule_applies_unallocated() -> None:
    fleet = Fleet()
    fleet.host_rule(1, "other*", "infra")
    fleet.sample(at(10))
    fleet.build()
    assert attribution(fleet, "GPU-A", 10) == ("none", "(unallocated)", None, None)
