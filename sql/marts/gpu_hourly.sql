-- Per local day and hour, GPU, team, host (at its site: cluster), job and user: the sample sums of gpu_team_daily
-- (which adds up the hours of a day), of the report's utilization heatmaps and of
-- job_efficiency, a small table instead of the samples (a job or user adds rows only where
-- it changes within the hour; every reader but job_efficiency sums over them). A table: an
-- incremental build replaces a GPU's rows from the local hour of its first new sample on,
-- so a cycle late in the day reads an hour of samples, not a day.
with samples as (
    select * from samples_attributed_rows
),

hours as (
    select
        day,
        hour,
        series_id,
        team_id,
        host_id,
        job_key,
        user_id,
        count(*) as samples,
        sum(interval_s)::double as observed_s,
        coalesce(sum(interval_s) filter (where gpu_util_pct is not null), 0)::double
            as utilization_s,
        coalesce(sum(gpu_util_pct::double / 100 * interval_s), 0) as busy_s,
        coalesce(sum(interval_s) filter (where sample_flag(flags, 'is_idle')), 0)::double
            as idle_s,
        coalesce(sum(interval_s) filter (where thermal_slowdown(clock_event_mask)), 0)::double
            as thermal_s,
        sum(energy_j) as energy_j,
        min(ts) as first_ts,
        max(ts) as last_ts,
        coalesce(sum(interval_s) filter (where attribution_code = 1), 0)::double
            as allocated_s,
        max(mem_used_bytes) as max_mem_used_bytes,
        max(mem_total_bytes) as mem_total_bytes,
    from samples
    group by day, hour, series_id, team_id, host_id, job_key, user_id
),

named_hours as (
    select * from id_names(hours)
),

final as (
    select
        day,
        hour,
        iso_week(day) as iso_week,
        week_start(day) as week_start,
        gpu_uuid,
        team,
        host,
        cluster,
        gpu_name,
        job_id,
        "user",
        * exclude (day, hour, gpu_uuid, team, host, cluster, gpu_name, job_id, "user"),
    from named_hours
)

select * from final
