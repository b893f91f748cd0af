-- GPU usage, idle time, waste and energy per local day and team (CONTRACT 7).
with gpu_team_rows as (
    select * from gpu_team_daily
),

team_sums as (
    select
        day,
        team,
        sum(observed_s) as observed_s,
        sum(utilization_s) as utilization_s,
        sum(busy_s) as busy_s,
        sum(idle_s) as idle_s,
        sum(waste_s) as waste_s,
        sum(waste_usd) as waste_usd,
        sum(energy_j) as energy_j,
        count(distinct gpu_uuid) as gpus,
    from gpu_team_rows
    group by day, team
),

final as (
    select
        day,
        team,
        observed_s / 3600 as gpu_hours,
        busy_s / 3600 as busy_gpu_hours,
        100 * busy_s / nullif(utilization_s, 0) as avg_util_pct,
        idle_s / 3600 as idle_gpu_hours,
        waste_s / 3600 as waste_gpu_hours,
        waste_usd,
        energy_j / 3.6e6 as energy_kwh,
        gpus,
        utilization_s / 3600 as measured_gpu_hours,
    from team_sums
)

select * from final
