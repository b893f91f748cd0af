-- Every (user, job id) a sample names, for int_users and int_jobs to number: the owners and
-- jobs of the processes on a GPU, and the job holding it by the scheduler's record with its
-- user (alloc_job_id, alloc_user).
-- `not materialized`: read twice below, DuckDB would otherwise materialize every column of
-- every sample first (28 of a full build's 190 CPU seconds at 1,000 GPUs x 7 days, against
-- 14 for the two reads)
with samples as not materialized (
    select * from stg_samples
),

processes as (
    -- no filter on the list's length: an empty or null list unnests to no row, and the
    -- filter cost 0.6 s of 5 (a week of the second bench fleet)
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
    -- A second scan of the samples, of these two columns only: 0.4-0.6 s of CPU more than
    -- the processes alone for the demo's 10 million samples (8 million with a job).
    -- Appending the pair to each sample's process list, to unnest both in one pass, cost
    -- 3 s more; grouping the samples by the pair and the list first, 0.5 s more.
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
