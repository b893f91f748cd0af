-- Per local day and GPU: hours observed, utilization, idle and throttled time, energy.
with gpu_team_rows as (
    select * from gpu_team_daily
),

gpu_sums as (
    select
        day,
        gpu_uuid,
        arg_max(host, last_ts) as host,
        arg_max(gpu_name, last_ts) as gpu_name,
        sum(samples)::bigint as samples,
        sum(observed_s) as observed_s,
        sum(utilization_s) as utilization_s,
        sum(busy_s) as busy_s,
        sum(idle_s) as idle_s,
        sum(waste_s) as waste_s,
        sum(thermal_s) as thermal_s,
        sum(energy_j) as energy_j,
    from gpu_team_rows
    group by day, gpu_uuid
),

final as (
    select
        day,
        gpu_uuid,
        host,
        gpu_name,
        observed_s / 3600 as hours_observed,
        100 * busy_s / nullif(utilization_s, 0) as avg_util_pct,
        idle_s / 3600 as idle_hours,
        thermal_s as thermal_seconds,
        energy_j / 3.6e6 as energy_kwh,
        samples,
        waste_s / 3600 as waste_hours,
    from gpu_sums
)

select * from final
