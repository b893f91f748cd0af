-- materialized: temp_view
-- Scheduler allocations; empty CSV cells become null (an empty team means: look the user up).
with source as (
    select * from allocations
),

final as (
    select
        nullif(trim(job_id), '') as job_id,
        nullif(trim("user"), '') as "user",
        nullif(trim(team), '') as team,
        host,
        gpu_index,
        start_ts,
        end_ts,
        source_file,
    from source
)

select * from final
