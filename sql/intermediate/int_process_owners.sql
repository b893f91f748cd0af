-- Every (user, job id) a sample names, for int_users and int_jobs to number: the owners and
-- jobs of the processes on a GPU, and the job holding it by the scheduler's record with its
-- user (alloc_job_id, alloc_user).
-- `not materialized`: read twice below, DuckDB would otherwise materialize every column of
-- every sample first, which costs more than reading the two sets of columns twice
with samples as not materialized (
    select * from stg_samples
),

processes as (
    -- no filter on the list's length: an empty or null list unnests to no row, and the
    -- filter would cost a pass over every list
    select unnest(processes) as process,
    from samples
),

process_owners as (
    select distinct
        process."user" as "user",
        process.job_id,
    from processes
),

holders as (
    -- A second scan of the samples, of these two columns only: cheaper than unnesting the
    -- pair with the process list in one pass, or grouping the samples by both first.
    select distinct
        alloc_user as "user",
        alloc_job_id as job_id,
    from samples
    where alloc_job_id is not null or alloc_user is not null
),

final as (
    select * from process_owners
    union
    select * from holders
)

select * from final
