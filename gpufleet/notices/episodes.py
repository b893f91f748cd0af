"""The waste episodes of a local day, and the contacts, as the published warehouse has them.

An episode belongs to day D (a local date in the time zone of its host's site,
docs/sites.md: [clusters.<site>] timezone, else the configured one) when it is waste,
has a user or is a job's (attributed by allocation: a Kubernetes pod with no user label,
say, whose notice goes to the team's lead), and either ended in D (its last sample's `ts`
falls in D, the contract's day of a sample) or is still open: its last sample is its GPU's
latest sample in the warehouse and it began before D ended. So a GPU idle since yesterday
afternoon and still idle at the last collector flush is in yesterday's notices, and an
episode is never in two days' unless it was still open on the first (and then
`notices_sent` keeps it out of the second). Its times are in that zone too, named with them.
"""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass, field

import duckdb

from gpufleet.episode_groups import gpu_summary, overlapping, span
from gpufleet.errors import GpufleetError
from gpufleet.notices.sent_log import sent_episodes_sql
from gpufleet.schedulers import Scheduler, advice, job_label, scheduler_of, slurm_jobs_sql

_DAY_EPISODES_SQL = """
with episodes as (
    select * from idle_episodes
),

gpu_days as (
    select * from gpu_team_daily
),

sent as (
    {sent}
),

slurm_jobs as (
    {slurm_jobs}
),

gpu_last_samples as (
    select
        gpu_uuid,
        max(last_ts) as last_ts,
    from gpu_days
    group by gpu_uuid
),

site_days as (
    -- the day at each site: from its local midnight to the next, in the site's zone
    select
        *,
        timezone(zone, $day::timestamp) as day_start,
        timezone(zone, ($day + 1)::timestamp) as day_end,
    from (
        select
            episodes.*,
            coalesce(
                json_transform($site_zones, '"MAP(VARCHAR, VARCHAR)"')[episodes.cluster],
                $timezone
            ) as zone,
        from episodes
    )
),

day_episodes as (
    select
        site_days.*,
        site_days.end_ts >= gpu_last_samples.last_ts as is_open,
    from site_days
    inner join gpu_last_samples on gpu_last_samples.gpu_uuid = site_days.gpu_uuid
    where site_days.is_waste
        and (site_days."user" is not null or site_days.attributed_by = 'allocation')
        and site_days.start_ts < site_days.day_end
        and site_days.end_ts >= site_days.day_start
),

final as (
    select
        day_episodes.episode_id,
        day_episodes.gpu_uuid,
        day_episodes.host,
        day_episodes.gpu_index,
        day_episodes.gpu_name,
        day_episodes.team,
        day_episodes."user",
        day_episodes.job_id,
        day_episodes.start_ts,
        day_episodes.end_ts,
        day_episodes.idle_seconds,
        day_episodes.waste_usd,
        day_episodes.held_memory,
        day_episodes.is_open,
        exists (
            select 1 from sent
            where sent.gpu_uuid = day_episodes.gpu_uuid
                and sent.episode_id = day_episodes.episode_id
        ) as is_sent,
        day_episodes.cluster,
        day_episodes.attributed_by,
        exists (
            select 1 from slurm_jobs
            where day_episodes.job_id in (slurm_jobs.job_id, slurm_jobs.job_id_raw)
        ) as is_slurm_job,
        day_episodes.zone,
    from day_episodes
    where (day_episodes.end_ts < day_episodes.day_end or day_episodes.is_open)
        and ($only_zone is null or day_episodes.zone = $only_zone)
)

select * from final
order by "user" nulls last, start_ts, host, gpu_index, gpu_uuid
"""


@dataclass(frozen=True, kw_only=True)
class WasteEpisode:
    """One waste episode of `idle_episodes`, its times in `timezone`: its host's site's."""

    episode_id: int
    gpu_uuid: str
    host: str
    gpu_index: int
    gpu_name: str | None
    team: str
    user: str | None  # None: a job with no known user (its team's lead is told)
    job_id: str | None
    start_ts: dt.datetime
    end_ts: dt.datetime
    idle_seconds: float
    waste_usd: float
    held_memory: bool
    is_open: bool  # its last sample is its GPU's latest: still idle when last heard of
    is_sent: bool  # notices_sent has it
    cluster: str | None = None  # the host's site (docs/sites.md); None: none
    attributed_by: str | None = None  # 'allocation' or 'process' (idle_episodes)
    is_slurm_job: bool = False  # slurm_jobs has its job
    timezone: str = "UTC"  # its site's ([clusters.<site>] timezone), else the configured one

    @property
    def gpu_hours(self) -> float:
        return self.idle_seconds / 3600


@dataclass(frozen=True, kw_only=True)
class NoticeLine:
    """One line of a notice: a user's waste episodes of one job in the day that overlap in
    time, on however many GPUs and hosts, with the job's other episodes on those GPUs (a
    busy spell or a short gap split them); without a job, the user's on one host so. The
    sums are the episodes' (`idle_episodes`); each episode is still sent and recorded on
    its own (`notices_sent`)."""

    episodes: tuple[WasteEpisode, ...]  # by start

    @property
    def _first(self) -> WasteEpisode:
        return self.episodes[0]

    @property
    def cluster(self) -> str | None:
        return self._first.cluster

    @property
    def timezone(self) -> str:
        """The zone of its times: its site's (a line is one site's)."""
        return self._first.timezone

    @property
    def user(self) -> str | None:
        return self._first.user

    @property
    def job_id(self) -> str | None:
        return self._first.job_id

    @property
    def scheduler(self) -> Scheduler:
        return scheduler_of(
            self.job_id,
            attributed_by=self._first.attributed_by,
            is_slurm_job=any(episode.is_slurm_job for episode in self.episodes),
        )

    @property
    def job(self) -> str:
        """`job 4807074`, `pod ml-serving/llm-0`, `no job`."""
        return job_label(self.job_id, self.scheduler)

    @property
    def advice(self) -> str:
        """What frees the GPUs: `scancel 4807074`, `kubectl delete pod ...`, or a sentence."""
        return advice(self.job_id, self.scheduler)

    @property
    def gpu_count(self) -> int:
        return len({episode.gpu_uuid for episode in self.episodes})

    def gpus(self, site: str = " at site {}") -> str:
        """The GPUs as `node12 GPUs 0-7`, each host followed by `site` with the host's site
        in it, when it has one (`node01 at site siteB GPU 0`)."""
        return gpu_summary(
            (
                episode.host + (site.format(episode.cluster) if episode.cluster else ""),
                episode.gpu_index,
            )
            for episode in self.episodes
        )

    @property
    def gpu_names(self) -> str:
        """The GPUs' models, each once (empty when none is known)."""
        names = dict.fromkeys(episode.gpu_name for episode in self.episodes if episode.gpu_name)
        return ", ".join(names)

    @property
    def episode_count(self) -> int:
        return len(self.episodes)

    @property
    def start_ts(self) -> dt.datetime:
        return self._first.start_ts

    @property
    def end_ts(self) -> dt.datetime:
        return max(episode.end_ts for episode in self.episodes)

    @property
    def idle_for(self) -> str:
        """From its first episode's start to its last one's end: `6 h`."""
        return span((self.end_ts - self.start_ts).total_seconds())

    @property
    def is_open(self) -> bool:
        """One of its episodes is still idle at its GPU's last sample."""
        return any(episode.is_open for episode in self.episodes)

    @property
    def held_memory(self) -> bool:
        return any(episode.held_memory for episode in self.episodes)

    @property
    def gpu_hours(self) -> float:
        return sum(episode.gpu_hours for episode in self.episodes)

    @property
    def waste_usd(self) -> float:
        return sum(episode.waste_usd for episode in self.episodes)


def _line_key(episode: WasteEpisode) -> tuple[str | None, ...]:
    """A job's episodes at its site, or a user's episodes without a job on one host."""
    if episode.job_id is not None:
        return ("job", episode.user, episode.cluster, episode.job_id)
    return ("host", episode.user, episode.cluster, episode.host)


def notice_lines(episodes: Iterable[WasteEpisode]) -> list[NoticeLine]:
    """The episodes as a notice lists them (see NoticeLine), each line where its first
    episode was."""
    listed = list(episodes)
    place = {id(episode): index for index, episode in enumerate(listed)}
    groups = overlapping(
        listed,
        key=_line_key,
        start=lambda episode: episode.start_ts,
        end=lambda episode: episode.end_ts,
        same=lambda episode: episode.gpu_uuid,
    )
    groups.sort(key=lambda group: min(place[id(episode)] for episode in group))
    return [NoticeLine(episodes=tuple(group)) for group in groups]


@dataclass(frozen=True, kw_only=True)
class Team:
    """A team's lead and the addresses copied (ref/teams.csv)."""

    lead_email: str
    cc: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Contacts:
    """Users' addresses (ref/users.csv) and teams' leads (ref/teams.csv)."""

    user_emails: dict[str, str] = field(default_factory=dict)
    teams: dict[str, Team] = field(default_factory=dict)


def yesterday(timezone: str, now: dt.datetime | None = None) -> dt.date:
    """The local date before today's in `timezone`."""
    moment = now or dt.datetime.now(dt.UTC)
    return moment.astimezone(zoneinfo.ZoneInfo(timezone)).date() - dt.timedelta(days=1)


def _has_tables(con: duckdb.DuckDBPyConnection, *names: str) -> bool:
    row = con.execute(
        "select count(distinct table_name) from duckdb_tables()"
        " where database_name = current_database() and schema_name = 'main'"
        " and list_contains($names, table_name)",
        {"names": list(names)},
    ).fetchone()
    return bool(row and row[0] == len(names))


def day_episodes(
    con: duckdb.DuckDBPyConnection,
    day: dt.date,
    timezone: str,
    sites: Iterable[tuple[str, str]] = (),
    *,
    only_zone: str | None = None,
) -> list[WasteEpisode]:
    """The day's waste episodes with a user, sent or not, by user and start: `day` is the
    local date at each host's site, in its zone of `sites` ((site, zone) pairs: the
    configuration's [clusters.<site>] timezone), else in `timezone`; each episode's times
    in that zone. With `only_zone`, the episodes of the sites in that zone only."""
    if not _has_tables(con, "idle_episodes", "gpu_team_daily"):
        raise GpufleetError("the warehouse has no idle_episodes yet; run 'gpufleet build' first")
    sql = _DAY_EPISODES_SQL.format(sent=sent_episodes_sql(con), slurm_jobs=slurm_jobs_sql(con))
    parameters = {
        "day": day,
        "timezone": timezone,
        "site_zones": json.dumps(dict(sites)),
        "only_zone": only_zone,
    }
    rows = con.execute(sql, parameters).fetchall()
    return [
        WasteEpisode(
            episode_id=int(row[0]),
            gpu_uuid=row[1],
            host=row[2],
            gpu_index=int(row[3]),
            gpu_name=row[4],
            team=row[5],
            user=row[6],
            job_id=row[7],
            start_ts=row[8].astimezone(zoneinfo.ZoneInfo(row[18])),
            end_ts=row[9].astimezone(zoneinfo.ZoneInfo(row[18])),
            idle_seconds=float(row[10]),
            waste_usd=float(row[11]),
            held_memory=bool(row[12]),
            is_open=bool(row[13]),
            is_sent=bool(row[14]),
            cluster=row[15],
            attributed_by=row[16],
            is_slurm_job=bool(row[17]),
            timezone=row[18],
        )
        for row in rows
    ]


def read_contacts(con: duckdb.DuckDBPyConnection) -> Contacts:
    """The contacts as last ingested (none before the first ingest that knew them)."""
    if not _has_tables(con, "ref_user_emails", "ref_teams"):
        return Contacts()
    emails = con.execute('select "user", email from ref_user_emails').fetchall()
    teams = con.execute("select team, lead_email, cc from ref_teams").fetchall()
    return Contacts(
        user_emails={user: email for user, email in emails},
        teams={team: Team(lead_email=lead, cc=tuple(cc)) for team, lead, cc in teams},
    )
