-- materialized: temp_view
-- The Slurm jobs `gpufleet import slurm` recorded (raw/jobs/*.csv), one row per job and
-- start (a requeued job starts again under the same id); empty text becomes null (an empty
-- team means: look the user up in users.csv). job_id is the id Slurm prints (4242_7 for an
-- array task), job_id_raw the job's own SLURM_JOB_ID (4250), which its samples may name;
-- seen_ts when the import last saw it running (null: not given).
with source as (
    select * from slurm_jobs
),

final as (
    select
        trim(job_id) as job_id,
        nullif(trim(job_id_raw), '') as job_id_raw,
        nullif(trim(cluster), '') as cluster,
        nullif(trim("user"), '') as "user",
        nullif(trim(account), '') as account,
        nullif(trim(partition), '') as partition,
        nullif(trim(state), '') as state,
        nullif(trim(team), '') as team,
        gpus,
        hosts,
        start_ts,
        end_ts,
        seen_ts,
    from source
)

select * from final
