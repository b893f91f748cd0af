-- One row per idle episode (docs/reference.md#idle-episode): who held the idle GPU, for how
-- long, and what the waste cost.
with idle_episodes as (
    select * from int_idle_episodes
),

final as (
    select
        episode_id,
        gpu_uuid,
        host,
        cluster,
        gpu_index,
        gpu_name,
        team,
        "user",
        job_id,
        attributed_by,
        start_ts,
        end_ts,
        idle_seconds,
        samples,
        is_waste,
        held_memory,
        waste_usd,
    from idle_episodes
)

select * from final
