-- Each idle episode's samples summed per local day and host: the pieces its waste hours are
-- counted in (an episode crossing midnight puts each sample's hours on its own day), and
-- from which int_idle_episodes adds up the whole episode.
with series_runs as (
    select * from int_series_runs
),

idle_pieces as (
    select * from series_runs
    where idle_episode_id is not null
),

final as (
    select
        idle_episode_id as run_id,
        day,
        host,
        any_value(gpu_uuid) as gpu_uuid,
        any_value(gpu_name) as gpu_name,
        -- constant within an idle episode
        any_value(first_team) as team,
        any_value(first_attributed_by) as attributed_by,
        arg_min(first_gpu_index, first_ts) as first_gpu_index,
        arg_min(first_user, first_ts) as first_user,
        arg_min(first_job_id, first_ts) as first_job_id,
        min(first_ts) as first_ts,
        arg_min(first_interval_s, first_ts) as first_interval_s,
        max(last_ts) as last_ts,
        sum(seconds) as idle_seconds,
        sum(samples)::bigint as samples,
        bool_or(has_process) as held_memory,
    from idle_pieces
    group by idle_episode_id, day, host
)

select * from final
