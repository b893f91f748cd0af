-- Every job id a sample can be attributed to (an allocation's, the job holding the GPU by
-- the scheduler's record in a sample, or a process's: int_process_owners reads both), with
-- a small integer key that samples_attributed_rows stores instead of the id string (kept
-- across builds in build_state.jobs).
with allocations as (
    select * from stg_allocations
),

process_owners as (
    select * from int_process_owners
),

known as (
    select job_id as name, job_key as id, from build_state.jobs
),

jobs as (
    select job_id as name from allocations where job_id is not null
    union
    select job_id as name from process_owners where job_id is not null
),

numbered as (
    select * from stable_ids(jobs, known)
),

final as (
    select
        id::integer as job_key,
        name as job_id,
    from numbered
)

select * from final
