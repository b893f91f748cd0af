-- One row per thermal throttling event (docs/reference.md#thermal-event).
with thermal_events as (
    select * from int_thermal_events
),

final as (
    select
        event_id,
        gpu_uuid,
        host,
        cluster,
        gpu_index,
        team,
        start_ts,
        end_ts,
        duration_s,
        samples,
        max_temp_gpu_c,
        min_sm_clock_mhz,
        reasons_mask,
        is_hw,
        gpu_name,
    from thermal_events
)

select * from final
