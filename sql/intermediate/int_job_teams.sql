-- Every job id a sample can name, with its job's key and Slurm team (docs/reference.md#
-- attribution, rules 1b and 2): the team of the slurm_jobs row whose start_ts is the latest
-- at or before a sample, null where that row has none or the job is not in slurm_jobs. A
-- requeued job has a row per start: each covers [its start, the next start), the first
-- from -infinity (a sample before every start takes the first row), so samples find theirs
-- with an equi-join on the id and a range check on a handful of rows, not a join per
-- sample over all the jobs. Jobs outside slurm_jobs have one row over all time.
-- `job_id` is the id as a sample names it: the id Slurm prints (4242_7), or the job's own
-- SLURM_JOB_ID (job_id_raw, 4250) where that is no row's printed id, which takes the key
-- and team of the job it is (int_jobs numbers only the printed id).
-- An id that the records of two Slurm clusters or more use (docs/sites.md) has spans per
-- cluster (`site`) besides those of all its records together (`site` null): a sample at the
-- site of one of those clusters takes its cluster's, any other sample the others
-- (`own_sites` lists the clusters that have their own).
with jobs as (
    select * from int_jobs
),

slurm_jobs as (
    select * from stg_slurm_jobs
),

teams as (
    select * from int_teams
),

starts as (
    -- a job imported twice with the same start counts once (the last team by name wins)
    select
        job_id,
        cluster,
        start_ts,
        max(team) as team,
    from slurm_jobs
    group by job_id, cluster, start_ts
),

raw_starts as (
    select distinct
        job_id_raw as name,
        job_id,
        cluster,
        start_ts,
    from slurm_jobs
    where job_id_raw is not null
        and job_id_raw not in (select job_id from slurm_jobs)
),

named_starts as (
    select job_id as name, job_id, cluster, start_ts, team, from starts
    union all
    select raw_starts.name, starts.job_id, starts.cluster, starts.start_ts, starts.team,
    from raw_starts
    inner join starts
        on starts.job_id = raw_starts.job_id
        and starts.cluster is not distinct from raw_starts.cluster
        and starts.start_ts = raw_starts.start_ts
),

name_clusters as (
    -- the names that the records of two clusters or more use
    select
        name,
        list(distinct cluster order by cluster) as clusters,
    from named_starts
    where cluster is not null
    group by name
    having count(distinct cluster) > 1
),

site_starts as (
    -- every name's records together (whatever their cluster) ...
    select
        name,
        job_id,
        null::varchar as site,
        start_ts,
        max(team) as team,
    from named_starts
    group by name, job_id, start_ts
    union all
    -- ... and those of each cluster of a name that two clusters use
    select
        named_starts.name,
        named_starts.job_id,
        named_starts.cluster as site,
        named_starts.start_ts,
        named_starts.team,
    from named_starts
    semi join name_clusters on name_clusters.name = named_starts.name
    where named_starts.cluster is not null
),

spans as (
    select
        name,
        job_id,
        site,
        team,
        case
            when row_number() over by_start = 1 then -9223372036854775808
            else epoch_us(start_ts)
        end as from_us,
        coalesce(epoch_us(lead(start_ts) over by_start), 9223372036854775807) as to_us,
    from site_starts
    window by_start as (partition by name, site order by start_ts, job_id)
),

final as (
    select
        jobs.job_key,
        spans.name as job_id,
        spans.site,
        case
            when spans.site is null then coalesce(name_clusters.clusters, []::varchar[])
        end as own_sites,
        spans.from_us,
        spans.to_us,
        teams.team_id,
    from spans
    inner join jobs on jobs.job_id = spans.job_id
    left join name_clusters on name_clusters.name = spans.name
    left join teams on teams.team = spans.team
    union all
    select
        jobs.job_key,
        jobs.job_id,
        null as site,
        []::varchar[] as own_sites,
        -9223372036854775808 as from_us,
        9223372036854775807 as to_us,
        null as team_id,
    from jobs
    anti join spans on spans.name = jobs.job_id
)

select * from final
