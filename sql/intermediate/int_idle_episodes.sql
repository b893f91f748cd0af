-- Idle runs aggregated to episodes (CONTRACT 6): start = first.ts - first.interval_s,
-- end = last.ts, idle_seconds = sum of interval_s; waste when long enough and attributed.
with samples as (
    select * from samples_attributed
),

gpu_prices as (
    select * from int_gpu_prices
),

idle_samples as (
    select * from samples
    where idle_episode_id is not null
),

episodes as (
    select
        idle_episode_id as episode_id,
        any_value(gpu_uuid) as gpu_uuid,
        arg_min_null(host, ts) as host,
        arg_min_null(gpu_index, ts) as gpu_index,
        arg_min_null(gpu_name, ts) as gpu_name,
        any_value(team) as team,
        arg_min_null("user", ts) as "user",
        arg_min_null(job_id, ts) as job_id,
        any_value(attributed_by) as attributed_by,
        min(ts) as first_ts,
        arg_min(interval_s, ts) as first_interval_s,
        max(ts) as end_ts,
        sum(interval_s)::double as idle_seconds,
        count(*) as samples,
        bool_or(has_process) as held_memory,
    from idle_samples
    group by idle_episode_id
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
            when is_waste then episodes.idle_seconds / 3600 * coalesce(gpu_prices.usd_per_gpu_hour, 0.0)
            else 0.0
        end as waste_usd,
    from episodes
    left join gpu_prices on gpu_prices.gpu_name is not distinct from episodes.gpu_name
)

select * from final
