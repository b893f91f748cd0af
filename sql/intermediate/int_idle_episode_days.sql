-- Each idle episode's samples summed per local day and host: the pieces its waste hours are
-- counted in (an episode crossing midnight puts each sample's hours on its own day), and
-- from which int_idle_episodes adds up the whole episode.
with series_runs as (
    select * from int_series_runs
),

idle_samples as (
    select * from series_runs
    where idle_episode_id is not null
),

final as (
    select
        idle_episode_id as episode_id,
        day,
        host,
        gpu_uuid,
        gpu_name,
        team,
        attributed_by,
        arg_min_null(gpu_index, ts) as first_gpu_index,
        arg_min_null("user", ts) as first_user,
        arg_min_null(job_id, ts) as first_job_id,
        min(ts) as first_ts,
        arg_min(interval_s, ts) as first_interval_s,
        max(ts) as last_ts,
        sum(interval_s)::double as idle_seconds,
        count(*) as samples,
        bool_or(has_process) as held_memory,
    from idle_samples
    group by all
)

select * from final
