-- Each idle episode's samples summed per local day and host (at its site): the pieces its waste hours are
-- counted in (an episode crossing midnight puts each sample's hours on its own day), and
-- from which int_idle_episodes adds up the whole episode. An episode is one GPU's idle run,
-- keyed by the time of its first sample; episode_id is the hash of the two.
with all_pieces as (
    select * from int_run_pieces
),

idle_pieces as (
    select * from all_pieces
    where idle_run_start_ts is not null
),

final as (
    select
        gpu_uuid,
        idle_run_start_ts as run_start_ts,
        (hash(gpu_uuid, idle_run_start_ts) >> 1)::bigint as episode_id,
        day,
        host,
        cluster,
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
    group by gpu_uuid, idle_run_start_ts, day, host, cluster
)

select * from final
