-- materialized: temp_view
-- The collector samples as the models use them: integer epoch microseconds for the series
-- arithmetic, the processes list with its count (int_samples_attributed picks the
-- process a sample is attributed to; int_process_owners reads every process), and the
-- Slurm job that holds the GPU by the scheduler's own record (alloc_job_id, alloc_user;
-- empty text is no job), and the site its writer recorded or its host=<host>@<site> folder
-- named (cluster; empty text: none).
with source as (
    select * from samples
),

renamed as (
    select
        gpu_uuid,
        ts,
        epoch_us(ts) as ts_us,
        interval_s,
        host,
        gpu_index,
        gpu_name,
        status,
        gpu_util_pct,
        power_w,
        energy_mj,
        temp_gpu_c,
        sm_clock_mhz,
        clock_event_mask,
        processes,
        coalesce(len(processes), 0) as process_count,
        nullif(alloc_job_id, '') as alloc_job_id,
        nullif(alloc_user, '') as alloc_user,
        nullif(cluster, '') as cluster,
        mem_used_bytes,
        mem_total_bytes,
    from source
),

final as (
    select
        gpu_uuid,
        ts,
        ts_us,
        interval_s,
        host,
        gpu_index,
        gpu_name,
        status,
        gpu_util_pct,
        power_w,
        energy_mj,
        temp_gpu_c,
        sm_clock_mhz,
        clock_event_mask,
        processes,
        process_count,
        alloc_job_id,
        alloc_user,
        cluster,
        mem_used_bytes,
        mem_total_bytes,
    from renamed
)

select * from final
