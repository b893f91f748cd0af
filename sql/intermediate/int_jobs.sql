-- Every job id a sample can be attributed to (an allocation's or a process's), with a small
-- integer key that samples_attributed_rows stores instead of the id string (kept across
-- builds in build_state.jobs).
with allocations as (
    select * from stg_allocations
),

process_owners as (
    select * from int_process_owners
),

known as (
    select * from build_state.jobs
),

jobs as (
    select job_id from allocations where job_id is not null
    union
    select job_id from process_owners where job_id is not null
),

numbered as (
    select
        jobs.job_id,
        known.job_key as known_key,
        row_number() over (partition by known.job_key is null order by jobs.job_id) as n,
    from jobs
    left join known on known.job_id = jobs.job_id
),

final as (
    select
        stable_id(known_key, (select max(job_key) from known), n)::integer as job_key,
        job_id,
    from numbered
)

select * from final
