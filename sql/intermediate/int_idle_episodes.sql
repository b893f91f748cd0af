-- Idle episodes (docs/reference.md#idle-episode): start = first.ts - first.interval_s,
-- end = last.ts, idle_seconds = sum of interval_s; waste when it lasts at least
-- idle.min_minutes and is attributed; user and job_id of its first sample; priced by the
-- GPU's name at its site, each day's idle seconds at that day's price (int_gpu_prices). The id comes from the GPU and the first sample's time (int_idle_episode_days),
-- so a full and an incremental build agree on it.
with episode_days as (
    select * from int_idle_episode_days
),

gpu_prices as (
    select * from int_gpu_prices
),

priced_days as (
    select
        episode_days.*,
        coalesce(gpu_prices.usd_per_gpu_hour, 0.0) as usd_per_gpu_hour,
    from episode_days
    left join gpu_prices
        on gpu_prices.gpu_name is not distinct from episode_days.gpu_name
        and gpu_prices.cluster is not distinct from episode_days.cluster
        and (gpu_prices.valid_from is null or episode_days.day >= gpu_prices.valid_from)
        and (gpu_prices.valid_to is null or episode_days.day < gpu_prices.valid_to)
),

episodes as (
    select
        episode_id,
        gpu_uuid,
        -- a struct: arg_min skips a null cluster
        arg_min({'host': host, 'cluster': cluster}, first_ts) as place,
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
        min(usd_per_gpu_hour) as usd_per_gpu_hour,
        -- a price that changes during the episode: each day's seconds at its own price
        max(usd_per_gpu_hour) <> min(usd_per_gpu_hour) as price_changes,
        sum(idle_seconds * usd_per_gpu_hour) as priced_seconds,
    from priced_days
    group by episode_id, gpu_uuid
),

final as (
    select
        episodes.episode_id,
        episodes.gpu_uuid,
        episodes.place.host,
        episodes.place.cluster,
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
        episodes.usd_per_gpu_hour,
        case
            when not is_waste then 0.0
            when episodes.price_changes then episodes.priced_seconds / 3600
            else episodes.idle_seconds / 3600 * episodes.usd_per_gpu_hour
        end as waste_usd,
    from episodes
)

select * from final
