-- materialized: view
-- Every sample with its attribution, energy, local day and week, and whether it starts an
-- idle episode or a thermal event: samples_attributed_rows with its ids as names.
-- The id tables are joined here, not through the id_names macro (sql/_macros.sql): a
-- view outlives the build's macros.
with stored as (
    select * from samples_attributed_rows
),

series as (
    select * from build_state.series
),

hosts as (
    select * from build_state.hosts
),

teams as (
    select * from build_state.teams
),

users as (
    select * from build_state.users
),

jobs as (
    select * from build_state.jobs
),

statuses as (
    select * from build_state.statuses
),

final as (
    select
        series.gpu_uuid,
        stored.ts,
        hosts.host,
        hosts.cluster,
        stored.gpu_index,
        series.gpu_name,
        stored.interval_s,
        statuses.status,
        stored.gpu_util_pct,
        teams.team,
        users."user",
        jobs.job_id,
        -- spelled out, not the attribution_name macro: a view outlives the build's macros
        case stored.attribution_code
            when 1 then 'allocation'
            when 2 then 'process'
            when 3 then 'host'
            when 4 then 'none'
        end as attributed_by,
        -- spelled out, not the sample_flag and thermal_slowdown macros (as above)
        case when stored.gpu_util_pct is not null then stored.flags & 1 != 0 end as is_idle,
        stored.energy_j,
        stored.day,
        stored.hour,
        -- spelled out, not the iso_week and week_start macros (as above)
        strftime(stored.day, '%G-W%V') as iso_week,
        stored.day - (isodow(stored.day) - 1)::integer as week_start,
        stored.flags & 2 != 0 as has_process,
        stored.flags & 4 != 0 as is_contiguous,
        coalesce(stored.clock_event_mask & 96 != 0, false) as is_thermal,
        stored.clock_event_mask,
        stored.temp_gpu_c,
        stored.sm_clock_mhz,
        stored.flags & 8 != 0 as starts_idle_episode,
        stored.flags & 16 != 0 as starts_thermal_event,
    from stored
    inner join series on series.series_id = stored.series_id
    inner join hosts on hosts.host_id = stored.host_id
    inner join teams on teams.team_id = stored.team_id
    inner join statuses on statuses.status_id = stored.status_id
    left join users on users.user_id = stored.user_id
    left join jobs on jobs.job_key = stored.job_key
)

select * from final
