-- The islands of gaps-and-islands, for idle episodes and thermal events together: the idle
-- and thermal samples numbered into runs, summed into pieces. A run is the samples from one
-- that starts it (int_samples_sequenced) up to the next start of the same kind, so its
-- number is the running count of starts; only idle and thermal samples need numbering, so
-- the window sorts only them.
-- A piece is the samples of one idle run and one thermal run (either may be null) on one
-- local day and host; every measure below adds up over pieces, so int_idle_episode_days
-- and int_thermal_events regroup this small table instead of the samples.
-- Ids: the series in the high 32 bits, the run's number within the series below.
with samples as (
    select * from samples_attributed
),

series_ids as (
    select * from int_series_ids
),

run_samples as (
    select
        series_ids.series_id,
        samples.ts,
        samples.interval_s,
        samples.day,
        samples.host,
        samples.gpu_index,
        samples.team,
        samples."user",
        samples.job_id,
        samples.attributed_by,
        samples.is_idle,
        samples.is_thermal,
        samples.has_process,
        samples.clock_event_mask,
        samples.temp_gpu_c,
        samples.sm_clock_mhz,
        samples.starts_idle_episode,
        samples.starts_thermal_event,
    from samples
    inner join series_ids on series_ids.gpu_uuid = samples.gpu_uuid
    where samples.is_idle or samples.is_thermal
),

numbered as (
    select
        *,
        sum(starts_idle_episode::integer) over series as idle_run_number,
        sum(starts_thermal_event::integer) over series as thermal_run_number,
    from run_samples
    window series as (
        partition by series_id order by ts rows between unbounded preceding and current row
    )
),

with_run_ids as (
    select
        *,
        case
            when is_idle then (series_id << 32) + idle_run_number::bigint
        end as idle_episode_id,
        case
            when is_thermal then (series_id << 32) + thermal_run_number::bigint
        end as thermal_event_id,
    from numbered
),

pieces as (
    select
        idle_episode_id,
        thermal_event_id,
        series_id,
        day,
        host,
        arg_min_null(gpu_index, ts) as first_gpu_index,
        arg_min_null(team, ts) as first_team,
        arg_min_null(attributed_by, ts) as first_attributed_by,
        arg_min_null("user", ts) as first_user,
        arg_min_null(job_id, ts) as first_job_id,
        min(ts) as first_ts,
        arg_min(interval_s, ts) as first_interval_s,
        max(ts) as last_ts,
        sum(interval_s)::double as seconds,
        count(*) as samples,
        bool_or(has_process) as has_process,
        max(temp_gpu_c) as max_temp_gpu_c,
        min(sm_clock_mhz) as min_sm_clock_mhz,
        bit_or(clock_event_mask) as reasons_mask,
    from with_run_ids
    group by idle_episode_id, thermal_event_id, series_id, day, host
),

final as (
    select
        pieces.*,
        series_ids.gpu_uuid,
        series_ids.gpu_name,
    from pieces
    inner join series_ids on series_ids.series_id = pieces.series_id
)

select * from final
