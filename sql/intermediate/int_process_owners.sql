-- Every (user, job id) a process on a GPU showed, for int_users and int_jobs to number: one
-- pass over the samples' process lists for both.
with samples as (
    select * from stg_samples
),

processes as (
    select unnest(processes) as process,
    from samples
    where len(processes) > 0
),

final as (
    select distinct
        process."user" as "user",
        process.job_id,
    from processes
)

select * from final
