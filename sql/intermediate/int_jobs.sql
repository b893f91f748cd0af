-- Every job id a sample can be attributed to (an allocation's, the job holding the GPU by
-- the scheduler's record in a sample, or a process's: int_process_owners reads both), with
-- a small integer key that samples_attributed_rows stores instead of the id string (kept
-- across builds in build_state.jobs). A sample names an array task or a heterogeneous
-- job's component by its own SLURM_JOB_ID (4250: what its cgroup and jobstats' gpustat
-- files say), Slurm's records by the id Slurm prints (4242_7): an id that is a slurm_jobs
-- row's job_id_raw, and no row's job_id, is that row's job here (int_job_teams maps it).
with allocations as (
    select * from stg_allocations
),

process_owners as (
    select * from int_process_owners
),

slurm_jobs as (
    select * from stg_slurm_jobs
),

known as (
    select job_id as name, job_key as id, from build_state.jobs
),

raw_ids as (
    select distinct
        job_id_raw,
        job_id,
    from slurm_jobs
    where job_id_raw is not null
        and job_id_raw not in (select job_id from slurm_jobs)
),

named as (
    select distinct job_id as name, from process_owners where job_id is not null
),

jobs as (
    select job_id as name from allocations where job_id is not null
    union
    select coalesce(raw_ids.job_id, named.name) as name,
    from named
    left join raw_ids on raw_ids.job_id_raw = named.name
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
