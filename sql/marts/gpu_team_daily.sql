-- Per local day, site (cluster), team, GPU and host: the sample sums every daily and weekly mart adds up
-- (the day's hours of gpu_hourly added up), with the hours of samples in waste episodes
-- (each sample's hours on its own day), and what the GPU-hours cost at the GPU's price of
-- the day (int_gpu_prices; of `(unallocated)`, the report's idle capacity). A table: an
-- incremental build replaces only the rows of the days it recomputes, then re-adds the
-- daily and weekly marts of those days from here.
with hours as (
    select * from gpu_hourly
),

episode_days as (
    select * from int_idle_episode_days
),

episodes as (
    select * from idle_episodes
),

gpu_prices as (
    select * from int_gpu_prices
),

sample_sums as (
    select
        day,
        iso_week,
        week_start,
        cluster,
        team,
        gpu_uuid,
        host,
        any_value(gpu_name) as gpu_name,
        sum(samples)::bigint as samples,
        sum(observed_s) as observed_s,
        sum(utilization_s) as utilization_s,
        sum(busy_s) as busy_s,
        sum(idle_s) as idle_s,
        sum(thermal_s) as thermal_s,
        sum(energy_j) as energy_j,
        sum(allocated_s) as allocated_s,
        sum(activity_s) as activity_s,
        sum(sm_active_s) as sm_active_s,
        min(first_ts) as first_ts,
        max(last_ts) as last_ts,
    from hours
    group by day, iso_week, week_start, cluster, team, gpu_uuid, host
),

waste_sums as (
    select
        episode_days.day,
        episode_days.team,
        episode_days.gpu_uuid,
        episode_days.host,
        episode_days.cluster,
        sum(episode_days.idle_seconds) as waste_s,
        sum(
            episode_days.idle_seconds / 3600 * coalesce(gpu_prices.usd_per_gpu_hour, 0.0)
        ) as waste_usd,
    from episode_days
    inner join episodes
        on episodes.gpu_uuid = episode_days.gpu_uuid
        and episodes.episode_id = episode_days.episode_id
    left join gpu_prices
        on gpu_prices.gpu_name is not distinct from episode_days.gpu_name
        and gpu_prices.cluster is not distinct from episode_days.cluster
        and (gpu_prices.valid_from is null or episode_days.day >= gpu_prices.valid_from)
        and (gpu_prices.valid_to is null or episode_days.day < gpu_prices.valid_to)
    where episodes.is_waste
    group by all
),

sample_costs as (
    select
        sample_sums.*,
        sample_sums.observed_s / 3600 * coalesce(gpu_prices.usd_per_gpu_hour, 0.0) as cost_usd,
    from sample_sums
    left join gpu_prices
        on gpu_prices.gpu_name is not distinct from sample_sums.gpu_name
        and gpu_prices.cluster is not distinct from sample_sums.cluster
        and (gpu_prices.valid_from is null or sample_sums.day >= gpu_prices.valid_from)
        and (gpu_prices.valid_to is null or sample_sums.day < gpu_prices.valid_to)
),

final as (
    select
        sample_sums.*,
        coalesce(waste_sums.waste_s, 0.0) as waste_s,
        coalesce(waste_sums.waste_usd, 0.0) as waste_usd,
    from sample_costs as sample_sums
    left join waste_sums
        on waste_sums.day = sample_sums.day
        and waste_sums.team = sample_sums.team
        and waste_sums.gpu_uuid = sample_sums.gpu_uuid
        and waste_sums.host = sample_sums.host
        and waste_sums.cluster is not distinct from sample_sums.cluster
)

select * from final
