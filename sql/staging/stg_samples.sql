-- materialized: temp_view
-- The collector samples as the models use them: integer epoch microseconds for the series
-- arithmetic, the processes list reduced to its count and its largest process.
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
        coalesce(len(processes), 0) as process_count,
        -- the process holding the most memory, ties to the lowest pid (CONTRACT 6, rule 2)
        case
            when len(processes) > 0 then list_reduce(
                processes,
                lambda best, candidate: case
                    when coalesce(candidate.used_mem_bytes, -1) > coalesce(best.used_mem_bytes, -1)
                        then candidate
                    when coalesce(candidate.used_mem_bytes, -1) = coalesce(best.used_mem_bytes, -1)
                        and candidate.pid < best.pid
                        then candidate
                    else best
                end
            )
        end as top_process,
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
        process_count,
        top_process."user" as top_process_user,
        top_process.job_id as top_process_job_id,
    from renamed
)

select * from final
