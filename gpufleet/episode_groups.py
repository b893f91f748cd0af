"""Idle episodes grouped the way people think of them, for the idle notices and the team
emails: a job's episodes that overlap in time are one group however many GPUs and hosts
they are on, so a job idle on 8 GPUs is one line ("job 4807074: 8 GPUs idle 6 h, node12
GPUs 0-7"), not 8 identical ones. Episodes without a job group by their user and host (or,
with no user either, by team and host: GPUs a team has through hosts.csv).

The helpers here word such a group: `counted` (`1 GPU`, `8 GPUs`), `gpu_summary` (`node12
GPUs 0-7`) and `span` (`6 h`, `2 h 20 min`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

MAX_HOSTS = 3  # hosts a GPU summary names; the rest are counted


def overlapping(
    items: Iterable[T],
    *,
    key: Callable[[T], Hashable],
    start: Callable[[T], dt.datetime],
    end: Callable[[T], dt.datetime],
    same: Callable[[T], Hashable] | None = None,
) -> list[list[T]]:
    """`items` in groups: those of one `key` whose spans overlap (or touch) in time, chained
    (A overlaps B, B overlaps C: one group), and, with `same`, those of one key and the same
    `same(item)` too (a job's episodes on one GPU). Each group by start; the groups in the
    order of their first item's key's first appearance, then by start."""
    by_key: dict[Hashable, list[T]] = {}
    for item in items:
        by_key.setdefault(key(item), []).append(item)
    groups: list[list[T]] = []
    for members in by_key.values():
        members.sort(key=start)
        links: list[tuple[int, int]] = []
        latest_end, latest = end(members[0]), 0  # the member that ends last so far
        first_of: dict[Hashable, int] = {}
        for index, member in enumerate(members):
            if index and start(member) <= latest_end:
                links.append((index, latest))
            if end(member) > latest_end:
                latest_end, latest = end(member), index
            if same is not None:
                links.append((index, first_of.setdefault(same(member), index)))
        components: dict[int, list[T]] = {}
        for index, root in enumerate(_roots(len(members), links)):
            components.setdefault(root, []).append(members[index])
        groups += sorted(components.values(), key=lambda group: start(group[0]))
    return groups


def _roots(count: int, links: Iterable[tuple[int, int]]) -> list[int]:
    """For each of `count` items, its group's representative, the items of each link in
    one group (union-find)."""
    parent = list(range(count))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    for a, b in links:
        parent[root(a)] = root(b)
    return [root(index) for index in range(count)]


def counted(number: int, noun: str) -> str:
    """`1 GPU`, `8 GPUs`, `1 episode`, `3 episodes`."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def index_ranges(indices: Sequence[int], separator: str = ", ") -> str:
    """Sorted GPU indices, each run of consecutive ones as a range: `0-3, 6`."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][-1] + 1:
            runs[-1].append(index)
        else:
            runs.append([index])
    return separator.join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def gpu_summary(gpus: Iterable[tuple[str, int]], max_hosts: int = MAX_HOSTS) -> str:
    """(host, index) pairs as `node12 GPUs 0-7`, `node-a GPU 3`, `node-a GPUs 0, 2; node-b
    GPU 1`: the first `max_hosts` hosts by name, then how many GPUs on how many more."""
    by_host: dict[str, set[int]] = {}
    for host, index in gpus:
        by_host.setdefault(host, set()).add(index)
    hosts = sorted(by_host)
    shown = [
        f"{host} GPU{'s' * (len(by_host[host]) != 1)} {index_ranges(sorted(by_host[host]))}"
        for host in hosts[:max_hosts]
    ]
    rest = hosts[max_hosts:]
    if rest:
        more = sum(len(by_host[host]) for host in rest)
        shown.append(f"{counted(more, 'GPU')} on {counted(len(rest), 'more host')}")
    return "; ".join(shown)


def span(seconds: float) -> str:
    """A stretch of time as a message says it: `40 min`, `6 h`, `2 h 20 min`, `2.5 days`."""
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours >= 48:
        return f"{minutes / 1440:.1f} days"
    return f"{hours} h" if rest == 0 else f"{hours} h {rest} min"
