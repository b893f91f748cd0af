-- materialized: temp_view
-- The collector samples as the models use them: integer epoch microseconds for the series
-- arithmetic, the processes list reduced to its count and its largest process (and whole,
-- for int_process_owners).
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
        processes[1] as first_process,
        -- of several processes, the one holding the most memory, ties to the lowest pid
        -- (CONTRACT 6, rule 2): the maximum of (memory, -pid)
        case
            when len(processes) > 1 then list_max(
                list_transform(
                    processes,
                    lambda process: {
                        'used_mem_bytes': coalesce(process.used_mem_bytes, -1),
                        'negated_pid': -(process.pid::bigint),
                        'user': process."user",
                        'job_id': process.job_id,
                    }
                )
            )
        end as top_of_many,
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
        case
            when process_count = 1 then first_process."user" else top_of_many."user"
        end as top_process_user,
        case
            when process_count = 1 then first_process.job_id else top_of_many.job_id
        end as top_process_job_id,
    from renamed
)

select * from final
