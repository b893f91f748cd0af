-- Per local day and GPU: hours observed, utilization, idle and throttled time, energy. A
-- MIG device's row names its GPU (parent_gpu_uuid, as its samples do: build_state.series).
with gpu_team_rows as (
    select * from gpu_team_daily
),

series as (
    select * from build_state.series
),

gpu_sums as (
    select
        day,
        gpu_uuid,
        -- a struct: arg_max skips a null cluster
        arg_max({'host': host, 'cluster': cluster}, last_ts) as place,
        arg_max(gpu_name, last_ts) as gpu_name,
        sum(samples)::bigint as samples,
        sum(observed_s) as observed_s,
        sum(utilization_s) as utilization_s,
        sum(busy_s) as busy_s,
        sum(idle_s) as idle_s,
        sum(waste_s) as waste_s,
        sum(thermal_s) as thermal_s,
        sum(energy_j) as energy_j,
        sum(activity_s) as activity_s,
        sum(sm_active_s) as sm_active_s,
    from gpu_team_rows
    group by day, gpu_uuid
),

final as (
    select
        gpu_sums.day,
        gpu_sums.gpu_uuid,
        gpu_sums.place.host,
        gpu_sums.place.cluster,
        gpu_sums.gpu_name,
        observed_s / 3600 as hours_observed,
        100 * busy_s / nullif(utilization_s, 0) as avg_util_pct,
        idle_s / 3600 as idle_hours,
        thermal_s as thermal_seconds,
        energy_j / 3.6e6 as energy_kwh,
        samples,
        waste_s / 3600 as waste_hours,
        activity_s / 3600 as activity_gpu_hours,
        sm_active_s / 3600 as sm_active_gpu_hours,
        series.parent_gpu_uuid,
    from gpu_sums
    left join series on series.gpu_uuid = gpu_sums.gpu_uuid
)

select * from final
