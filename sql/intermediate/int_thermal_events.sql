-- Thermal runs summed to events (docs/reference.md#thermal-event): same start/end/duration
-- rule as idle episodes; the team of the first sample; the OR of the clock-event masks. The
-- id comes from the GPU and the first sample's time, so a full and an incremental build
-- agree on it.
with all_pieces as (
    select * from int_run_pieces
),

thermal_pieces as (
    select * from all_pieces
    where thermal_run_start_ts is not null
),

events as (
    select
        gpu_uuid,
        thermal_run_start_ts,
        any_value(gpu_name) as gpu_name,
        -- a struct: arg_min skips a null cluster
        arg_min({'host': host, 'cluster': cluster}, first_ts) as place,
        arg_min(first_gpu_index, first_ts) as gpu_index,
        arg_min(first_team, first_ts) as team,
        min(first_ts) as first_ts,
        arg_min(first_interval_s, first_ts) as first_interval_s,
        max(last_ts) as end_ts,
        sum(seconds) as duration_s,
        sum(samples)::bigint as samples,
        max(max_temp_gpu_c) as max_temp_gpu_c,
        min(min_sm_clock_mhz) as min_sm_clock_mhz,
        bit_or(reasons_mask) as reasons_mask,
    from thermal_pieces
    group by gpu_uuid, thermal_run_start_ts
),

final as (
    select
        (hash(gpu_uuid, first_ts) >> 1)::bigint as event_id,
        gpu_uuid,
        place.host,
        place.cluster,
        gpu_index,
        team,
        first_ts - to_microseconds((first_interval_s * 1000000)::bigint) as start_ts,
        end_ts,
        duration_s,
        samples,
        max_temp_gpu_c,
        min_sm_clock_mhz,
        reasons_mask,
        reasons_mask & 64 != 0 as is_hw,
        gpu_name,
    from events
)

select * from final
