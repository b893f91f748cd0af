-- The islands of gaps-and-islands, for idle episodes and thermal events together: the idle
-- and thermal samples keyed by the run they belong to, summed into pieces. A run is the
-- samples from one that starts it (see samples_attributed) up to the next start of the same
-- kind, so its key is the time of the latest start at or before the sample; only idle and
-- thermal samples need a key, so the window sorts only them.
-- A piece is the samples of one idle run and one thermal run (either may be null) in one
-- local hour and host; every measure below adds up over pieces, so int_idle_episode_days
-- and int_thermal_events regroup this small table instead of the samples. A table: an
-- incremental build replaces a GPU's pieces from the local hour of its first new
-- sample on, and re-adds only the runs those pieces belong to. A run already open before the samples read
-- begin gets the key '-infinity' here; the incremental build puts the run's start in.
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
        samples.hour,
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

keyed as (
    select
        *,
        case
            when is_idle then coalesce(
                max(case when starts_idle_episode then ts end) over series,
                '-infinity'::timestamptz
            )
        end as idle_run_start_ts,
        case
            when is_thermal then coalesce(
                max(case when starts_thermal_event then ts end) over series,
                '-infinity'::timestamptz
            )
        end as thermal_run_start_ts,
    from run_samples
    window series as (
        partition by series_id order by ts rows between unbounded preceding and current row
    )
),

pieces as (
    select
        idle_run_start_ts,
        thermal_run_start_ts,
        series_id,
        day,
        hour,
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
    from keyed
    group by idle_run_start_ts, thermal_run_start_ts, series_id, day, hour, host
),

final as (
    select
        series_ids.gpu_uuid,
        series_ids.gpu_name,
        pieces.* exclude (series_id),
    from pieces
    inner join series_ids on series_ids.series_id = pieces.series_id
)

select * from final
