-- Per local day, team and GPU: the sample sums every daily and weekly mart adds up, with
-- the hours of samples in waste episodes on that day (an episode crossing midnight puts
-- each sample's hours on that sample's own day).
with samples as (
    select * from samples_attributed
),

idle_episodes as (
    select * from int_idle_episodes
),

sample_sums as (
    select
        day,
        iso_week,
        week_start,
        team,
        gpu_uuid,
        host,
        gpu_name,
        count(*) as samples,
        sum(interval_s)::double as observed_s,
        coalesce(sum(interval_s) filter (where gpu_util_pct is not null), 0)::double
            as utilization_s,
        coalesce(sum(gpu_util_pct / 100 * interval_s), 0)::double as busy_s,
        coalesce(sum(interval_s) filter (where is_idle), 0)::double as idle_s,
        coalesce(sum(interval_s) filter (where is_thermal), 0)::double as thermal_s,
        sum(energy_j) as energy_j,
        min(ts) as first_ts,
        max(ts) as last_ts,
    from samples
    group by all
),

waste_sums as (
    select
        samples.day,
        samples.team,
        samples.gpu_uuid,
        samples.host,
        samples.gpu_name,
        sum(samples.interval_s)::double as waste_s,
        sum(samples.interval_s / 3600 * idle_episodes.usd_per_gpu_hour) as waste_usd,
    from samples
    inner join idle_episodes on idle_episodes.episode_id = samples.idle_episode_id
    where idle_episodes.is_waste
    group by all
),

final as (
    select
        sample_sums.*,
        coalesce(waste_sums.waste_s, 0.0) as waste_s,
        coalesce(waste_sums.waste_usd, 0.0) as waste_usd,
    from sample_sums
    left join waste_sums
        on waste_sums.day = sample_sums.day
        and waste_sums.team = sample_sums.team
        and waste_sums.gpu_uuid = sample_sums.gpu_uuid
        and waste_sums.host = sample_sums.host
        and waste_sums.gpu_name is not distinct from sample_sums.gpu_name
)

select * from final
