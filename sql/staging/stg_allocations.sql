-- materialized: temp_view
-- Scheduler allocations; empty CSV cells become null (an empty team means: look the user up;
-- an empty cluster: the row covers the host of that name at every site; an empty gpu_uuid:
-- the row holds the GPU of its gpu_index, else the MIG device or GPU of that UUID).
with source as (
    select * from allocations
),

final as (
    select
        nullif(trim(job_id), '') as job_id,
        nullif(trim("user"), '') as "user",
        nullif(trim(team), '') as team,
        host,
        nullif(trim(cluster), '') as cluster,
        gpu_index,
        nullif(trim(gpu_uuid), '') as gpu_uuid,
        start_ts,
        end_ts,
        source_file,
    from source
)

select * from final
