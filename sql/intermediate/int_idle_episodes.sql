-- Idle episodes (docs/reference.md#idle-episode): start = first.ts - first.interval_s,
-- end = last.ts, idle_seconds = sum of interval_s; waste when it lasts at least
-- idle.min_minutes and is attributed; user and job_id of its first sample; priced by the
-- GPU's name. The id comes from the GPU and the first sample's time (int_idle_episode_days),
-- so a full and an incremental build agree on it.
with episode_days as (
    select * from int_idle_episode_days
),

gpu_prices as (
    select * from int_gpu_prices
),

episodes as (
    select
        episode_id,
        gpu_uuid,
        arg_min(host, first_ts) as host,
        arg_min(first_gpu_index, first_ts) as gpu_index,
        any_value(gpu_name) as gpu_name,
        any_value(team) as team,
        arg_min(first_user, first_ts) as "user",
        arg_min(first_job_id, first_ts) as job_id,
        any_value(attributed_by) as attributed_by,
        min(first_ts) as first_ts,
        arg_min(first_interval_s, first_ts) as first_interval_s,
        max(last_ts) as end_ts,
        sum(idle_seconds) as idle_seconds,
        sum(samples)::bigint as samples,
        bool_or(held_memory) as held_memory,
    from episode_days
    group by episode_id, gpu_uuid
),

final as (
    select
        episodes.episode_id,
        episodes.gpu_uuid,
        episodes.host,
        episodes.gpu_index,
        episodes.gpu_name,
        episodes.team,
        episodes."user",
        episodes.job_id,
        episodes.attributed_by,
        episodes.first_ts - to_microseconds((episodes.first_interval_s * 1000000)::bigint)
            as start_ts,
        episodes.end_ts,
        episodes.idle_seconds,
        episodes.samples,
        episodes.idle_seconds >= 60 * getvariable('idle_min_minutes')
        and episodes.attributed_by != 'none' as is_waste,
        episodes.held_memory,
        coalesce(gpu_prices.usd_per_gpu_hour, 0.0) as usd_per_gpu_hour,
        case
            when is_waste then episodes.idle_seconds / 3600 * usd_per_gpu_hour else 0.0
        end as waste_usd,
    from episodes
    left join gpu_prices on gpu_prices.gpu_name is not distinct from episodes.gpu_name
)

select * from final
