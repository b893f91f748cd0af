"""Who is mailed what: the rules of the idle notices, on the day's episodes.

1. Episodes already in `notices_sent` are left out (never the same episode twice).
2. Users in `[notify] opt_out` (by name, or by their address) are left out entirely.
3. A user is notified when their remaining episodes add up to at least
   `[notify] min_waste_gpu_hours` GPU-hours, so nobody is mailed over a few minutes.
4. A user with an address (ref/users.csv `email`) gets one notice. The episodes of users
   without one go to their team's lead (ref/teams.csv), one notice per team, with the
   team's `cc` copied; with no lead (or a lead who opted out) nobody is mailed, and the
   run says so.
5. The episodes of a job with no known user (a Kubernetes pod without a user label) go to
   its team's lead the same way; rule 3 applies to them per team.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufleet.addresses import same_address
from gpufleet.config import NotifyConfig
from gpufleet.notices.episodes import Contacts, WasteEpisode

USER = "user"
TEAM_LEAD = "team_lead"
NO_USER = "(no user known)"  # how a job with no user is named in messages and summaries


@dataclass(frozen=True, kw_only=True)
class Notice:
    """One email: to a user about their episodes, or to a team's lead about the episodes
    of the team's users without an address."""

    kind: str  # USER or TEAM_LEAD
    day: dt.date
    to: str
    cc: tuple[str, ...]
    user: str | None  # USER notices
    team: str | None  # TEAM_LEAD notices
    episodes: tuple[WasteEpisode, ...]

    @property
    def gpu_hours(self) -> float:
        return sum(episode.gpu_hours for episode in self.episodes)

    @property
    def waste_usd(self) -> float:
        return sum(episode.waste_usd for episode in self.episodes)

    @property
    def users(self) -> tuple[str, ...]:
        """The users the notice is about; a job with no known user is `NO_USER`."""
        return tuple(dict.fromkeys(episode.user or NO_USER for episode in self.episodes))

    @property
    def timezones(self) -> tuple[str, ...]:
        """The zones of its episodes' times (each its site's), in the order they come."""
        return tuple(dict.fromkeys(episode.timezone for episode in self.episodes))

    @property
    def recipients(self) -> tuple[str, ...]:
        return (self.to, *self.cc)


@dataclass(frozen=True, kw_only=True)
class NoticePlan:
    """The notices of a day, and why the other episodes are not in one."""

    day: dt.date
    notices: tuple[Notice, ...]
    already_sent: int  # episodes
    opted_out: tuple[str, ...]  # users
    below_threshold: tuple[str, ...]  # users
    unreachable: tuple[tuple[str, str], ...]  # (user, team): no address and no lead


def _opted_out(name_or_address: str | None, opt_out: Sequence[str]) -> bool:
    if name_or_address is None:
        return False
    return any(
        entry == name_or_address or ("@" in entry and same_address(entry, name_or_address))
        for entry in opt_out
    )


def _by_user(episodes: Iterable[WasteEpisode]) -> dict[str, list[WasteEpisode]]:
    grouped: dict[str, list[WasteEpisode]] = {}
    for episode in episodes:
        if episode.user is not None:
            grouped.setdefault(episode.user, []).append(episode)
    return grouped


def _without_user(episodes: Iterable[WasteEpisode]) -> dict[str, list[WasteEpisode]]:
    """The episodes of jobs with no known user, by team."""
    grouped: dict[str, list[WasteEpisode]] = {}
    for episode in episodes:
        if episode.user is None:
            grouped.setdefault(episode.team, []).append(episode)
    return grouped


def plan_notices(
    day: dt.date,
    episodes: Sequence[WasteEpisode],
    contacts: Contacts,
    rules: NotifyConfig,
) -> NoticePlan:
    """Apply the rules to the day's episodes (as `day_episodes` returns them)."""
    fresh = [episode for episode in episodes if not episode.is_sent]
    notices: list[Notice] = []
    opted_out: list[str] = []
    below: list[str] = []
    for_leads: dict[str, list[WasteEpisode]] = {}
    unreachable: list[tuple[str, str]] = []
    for user, held in _by_user(fresh).items():
        address = contacts.user_emails.get(user)
        if _opted_out(user, rules.opt_out) or _opted_out(address, rules.opt_out):
            opted_out.append(user)
        elif sum(episode.gpu_hours for episode in held) < rules.min_waste_gpu_hours:
            below.append(user)
        elif address is not None:
            notices.append(
                Notice(
                    kind=USER,
                    day=day,
                    to=address,
                    cc=(),
                    user=user,
                    team=None,
                    episodes=tuple(held),
                )
            )
        else:
            for episode in held:
                for_leads.setdefault(episode.team, []).append(episode)
    for team, held in _without_user(fresh).items():
        if sum(episode.gpu_hours for episode in held) < rules.min_waste_gpu_hours:
            below.append(f"{NO_USER} (team {team})")
        else:
            for_leads.setdefault(team, []).extend(held)
    for team, held in sorted(for_leads.items()):
        lead = contacts.teams.get(team)
        if lead is None or _opted_out(lead.lead_email, rules.opt_out):
            unreachable.extend(dict.fromkeys((episode.user or NO_USER, team) for episode in held))
            continue
        cc = tuple(address for address in lead.cc if not _opted_out(address, rules.opt_out))
        notices.append(
            Notice(
                kind=TEAM_LEAD,
                day=day,
                to=lead.lead_email,
                cc=cc,
                user=None,
                team=team,
                episodes=tuple(
                    sorted(held, key=lambda e: (e.user is None, e.user or "", e.start_ts))
                ),
            )
        )
    return NoticePlan(
        day=day,
        notices=tuple(notices),
        already_sent=len(episodes) - len(fresh),
        opted_out=tuple(opted_out),
        below_threshold=tuple(below),
        unreachable=tuple(unreachable),
    )
