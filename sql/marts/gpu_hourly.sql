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
        -- GPU-seconds: a MIG device's seconds by its slice, none of its GPU's own row's
        -- (gpu_share, stg_samples); thermal_s is the GPU's own time throttled
        sum(interval_s::double * gpu_share) as observed_s,
        coalesce(sum(interval_s::double * gpu_share) filter (where gpu_util_pct is not null), 0)
            as utilization_s,
        coalesce(sum(gpu_util_pct::double / 100 * interval_s * gpu_share), 0) as busy_s,
        coalesce(
            sum(interval_s::double * gpu_share) filter (where sample_flag(flags, 'is_idle')), 0
        ) as idle_s,
        coalesce(sum(interval_s) filter (where thermal_slowdown(clock_event_mask)), 0)::double
            as thermal_s,
        sum(energy_j) as energy_j,
        min(ts) as first_ts,
        max(ts) as last_ts,
        coalesce(sum(interval_s::double * gpu_share) filter (where attribution_code = 1), 0)
            as allocated_s,
        max(mem_used_bytes) as max_mem_used_bytes,
        max(mem_total_bytes) as mem_total_bytes,
        -- activity (GPM): the GPU-seconds of samples that carry sm_active_pct, and those
        -- seconds times each activity share
        coalesce(
            sum(interval_s::double * gpu_share) filter (where sm_active_pct is not null), 0
        ) as activity_s,
        coalesce(sum(sm_active_pct::double / 100 * interval_s * gpu_share), 0) as sm_active_s,
        coalesce(
            sum(tensor_active_pct::double / 100 * interval_s * gpu_share)
                filter (where sm_active_pct is not null),
            0
        ) as tensor_active_s,
        coalesce(
            sum(dram_active_pct::double / 100 * interval_s * gpu_share)
                filter (where sm_active_pct is not null),
            0
        ) as dram_active_s,
        -- health: each XID event's code, the counters' growth, the flags seen (bit_or)
        coalesce(flatten(list(xid_errors) filter (where len(xid_errors) > 0)), [])::integer[]
            as xid_errors,
        sum(ecc_uncorrected_new) as ecc_uncorrected_new,
        sum(ecc_corrected_new) as ecc_corrected_new,
        sum(pcie_replays_new) as pcie_replays_new,
        bit_or(health_flags) as health_flags,
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
