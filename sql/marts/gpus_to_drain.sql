-- materialized: view
-- The GPUs whose latest day in gpu_health_daily has `drain` (docs/reference.md#drain): that
-- day's reasons, and the first day of the run of drain days it ends (since_day).
with health as (
    select * from gpu_health_daily
),

latest_days as (
    select
        gpu_uuid,
        max(day) as day,
    from health
    group by gpu_uuid
),

last_clean_days as (
    -- each GPU's latest day without drain
    select
        gpu_uuid,
        max(day) as day,
    from health
    where not drain
    group by gpu_uuid
),

drain_runs as (
    -- the first drain day after the latest clean one
    select
        health.gpu_uuid,
        min(health.day) as since_day,
    from health
    left join last_clean_days on last_clean_days.gpu_uuid = health.gpu_uuid
    where health.drain
        and (last_clean_days.day is null or health.day > last_clean_days.day)
    group by health.gpu_uuid
),

final as (
    select
        health.gpu_uuid,
        health.cluster,
        health.host,
        health.gpu_name,
        drain_runs.since_day,
        health.day as latest_day,
        health.drain_reasons,
        health.xid_errors,
    from health
    inner join latest_days
        on latest_days.gpu_uuid = health.gpu_uuid
        and latest_days.day = health.day
    inner join drain_runs on drain_runs.gpu_uuid = health.gpu_uuid
    where health.drain
)

select * from final
