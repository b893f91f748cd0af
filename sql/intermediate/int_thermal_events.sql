-- Thermal runs aggregated to events (CONTRACT 6): same start/end/duration rule as idle
-- episodes; the team of the first sample; the OR of the clock-event masks.
with series_runs as (
    select * from int_series_runs
),

thermal_samples as (
    select * from series_runs
    where thermal_event_id is not null
),

events as (
    select
        thermal_event_id as event_id,
        any_value(gpu_uuid) as gpu_uuid,
        arg_min_null(host, ts) as host,
        arg_min_null(gpu_index, ts) as gpu_index,
        arg_min_null(gpu_name, ts) as gpu_name,
        arg_min_null(team, ts) as team,
        min(ts) as first_ts,
        arg_min(interval_s, ts) as first_interval_s,
        max(ts) as end_ts,
        sum(interval_s)::double as duration_s,
        count(*) as samples,
        max(temp_gpu_c) as max_temp_gpu_c,
        min(sm_clock_mhz) as min_sm_clock_mhz,
        bit_or(clock_event_mask) as reasons_mask,
    from thermal_samples
    group by thermal_event_id
),

final as (
    select
        event_id,
        gpu_uuid,
        host,
        gpu_index,
        gpu_name,
        team,
        first_ts - to_microseconds((first_interval_s * 1000000)::bigint) as start_ts,
        end_ts,
        duration_s,
        samples,
        max_temp_gpu_c,
        min_sm_clock_mhz,
        reasons_mask,
        reasons_mask & 64 != 0 as is_hw,
    from events
)

select * from final
