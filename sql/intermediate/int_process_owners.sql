-- Every (user, job id) a process on a GPU showed, for int_users and int_jobs to number: one
-- pass over the samples' process lists for both.
with samples as (
    select * from stg_samples
),

processes as (
    -- no filter on the list's length: an empty or null list unnests to no row, and the
    -- filter cost 0.6 s of 5 (a week of the second bench fleet)
    select unnest(processes) as process,
    from samples
),

final as (
    select distinct
        process."user" as "user",
        process.job_id,
    from processes
)

select * from final
