-- materialized: temp_view
-- Every sample with its attribution (CONTRACT 6: allocation, else process, else host, else
-- none), whether it is idle or thermally throttled, and its series id and 15-minute bucket
-- (the series model joins the uuid, GPU name and local day back after its windows).
-- A view: it is read once, by the series model, so it is never held in memory whole.
with samples as (
    select * from stg_samples
),

series_ids as (
    select * from int_series_ids
),

allocation_segments as (
    select * from int_allocation_segments
),

users as (
    select * from stg_users
),

host_teams as (
    select * from int_host_teams
),

with_allocation as (
    select
        samples.*,
        allocation_segments.start_us is not null as has_allocation,
        allocation_segments.job_id as allocation_job_id,
        allocation_segments."user" as allocation_user,
        allocation_segments.team as allocation_team,
    from samples
    left join allocation_segments
        on allocation_segments.host = samples.host
        and allocation_segments.gpu_index = samples.gpu_index
        and allocation_segments.hour = samples.ts_us // 3600000000
        and samples.ts_us > allocation_segments.start_us
        and (allocation_segments.end_us is null or samples.ts_us <= allocation_segments.end_us)
),

attributed as (
    select
        with_allocation.*,
        case
            when has_allocation then 'allocation'
            when process_count > 0 then 'process'
            when host_teams.team is not null then 'host'
            else 'none'
        end as attributed_by,
        case
            when has_allocation then allocation_team
            when process_count > 0 then coalesce(users.team, '(unmapped)')
            when host_teams.team is not null then host_teams.team
            else '(unallocated)'
        end as team,
        case
            when has_allocation then allocation_user
            when process_count > 0 then top_process_user
        end as "user",
        case
            when has_allocation then allocation_job_id
            when process_count > 0 then top_process_job_id
        end as job_id,
    from with_allocation
    left join users on users."user" = with_allocation.top_process_user
    left join host_teams on host_teams.host = with_allocation.host
),

final as (
    select
        series_ids.series_id,
        attributed.ts,
        attributed.ts_us,
        attributed.interval_s,
        attributed.host,
        attributed.gpu_index,
        attributed.status,
        attributed.gpu_util_pct,
        attributed.team,
        attributed."user",
        attributed.job_id,
        attributed.attributed_by,
        attributed.gpu_util_pct < getvariable('idle_threshold_pct') as is_idle,
        attributed.process_count > 0 as has_process,
        coalesce(attributed.clock_event_mask & 96 != 0, false) as is_thermal,
        attributed.clock_event_mask,
        attributed.temp_gpu_c,
        attributed.sm_clock_mhz,
        attributed.power_w,
        attributed.energy_mj,
        attributed.ts_us // 900000000 as local_day_bucket,
    from attributed
    inner join series_ids on series_ids.gpu_uuid = attributed.gpu_uuid
)

select * from final
