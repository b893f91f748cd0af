-- Every job of int_jobs with its key and its Slurm team (docs/reference.md#attribution,
-- rules 1b and 2): the team of the slurm_jobs row whose start_ts is the latest at or before
-- a sample, null where that row has none or the job is not in slurm_jobs. A requeued job
-- has a row per start: each covers [its start, the next start), the first from -infinity
-- (a sample before every start takes the first row), so samples find theirs with an
-- equi-join on the job id and a range check on a handful of rows, not a join per sample
-- over all the jobs. Jobs outside slurm_jobs have one row over all time.
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

spans as (
    select
        job_id,
        team,
        case
            when row_number() over by_start = 1 then -9223372036854775808
            else epoch_us(start_ts)
        end as from_us,
        coalesce(epoch_us(lead(start_ts) over by_start), 9223372036854775807) as to_us,
    from starts
    window by_start as (partition by job_id order by start_ts)
),

final as (
    select
        jobs.job_key,
        jobs.job_id,
        coalesce(spans.from_us, -9223372036854775808) as from_us,
        coalesce(spans.to_us, 9223372036854775807) as to_us,
        teams.team_id,
    from jobs
    left join spans on spans.job_id = jobs.job_id
    left join teams on teams.team = spans.team
)

select * from final
