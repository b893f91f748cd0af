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
        start_ts,
        max(team) as team,
    from slurm_jobs
    group by job_id, start_ts
),

raw_starts as (
    select distinct
        job_id_raw as name,
        job_id,
        start_ts,
    from slurm_jobs
    where job_id_raw is not null
        and job_id_raw not in (select job_id from slurm_jobs)
),

named_starts as (
    select job_id as name, job_id, start_ts, team, from starts
    union all
    select raw_starts.name, starts.job_id, starts.start_ts, starts.team,
    from raw_starts
    inner join starts using (job_id, start_ts)
),

spans as (
    select
        name,
        job_id,
        team,
        case
            when row_number() over by_start = 1 then -9223372036854775808
            else epoch_us(start_ts)
        end as from_us,
        coalesce(epoch_us(lead(start_ts) over by_start), 9223372036854775807) as to_us,
    from named_starts
    window by_start as (partition by name order by start_ts, job_id)
),

final as (
    select
        jobs.job_key,
        spans.name as job_id,
        spans.from_us,
        spans.to_us,
        teams.team_id,
    from spans
    inner join jobs on jobs.job_id = spans.job_id
    left join teams on teams.team = spans.team
    union all
    select
        jobs.job_key,
        jobs.job_id,
        -9223372036854775808 as from_us,
        9223372036854775807 as to_us,
        null as team_id,
    from jobs
    anti join spans on spans.name = jobs.job_id
)

select * from final
