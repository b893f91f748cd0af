-- The islands of gaps-and-islands, for idle episodes and thermal events together: the idle
-- and thermal samples keyed by the run they belong to, summed into pieces. A run is the
-- samples from one that starts it (see samples_attributed_rows) up to the next start of
-- the same kind, so its key is the time of the latest start at or before the sample: one
-- as-of join of the series' samples with its starts of both kinds (cheaper than a running
-- max over a window of the samples, or an as-of join per kind).
-- Only idle and thermal samples need a key, so only they are joined.
-- A piece is the samples of one idle run and one thermal run (either may be null) in one
-- local hour and host, of one job (so first_job_id is the job of all its samples, and
-- job_efficiency counts a job's waste from its pieces); every measure below adds up over
-- pieces, so int_idle_episode_days and int_thermal_events regroup this small table
-- instead of the samples, and the mart run_pieces keeps it. A run already open before the
-- samples read begin gets the key '-infinity' here; an incremental build, which reads the
-- new samples only, puts the run's start in (gpufleet/warehouse/build/incremental/pieces.py)
-- and then gives int_idle_episode_days and int_thermal_events the touched runs' pieces of
-- every day, from run_pieces. Ids become names only after the pieces are summed
-- (gpufleet/warehouse/build/ids.py).
with samples as (
    select * from samples_attributed_rows
),

run_samples as (
    select
        series_id,
        ts,
        interval_s,
        day,
        hour,
        host_id,
        gpu_index,
        team_id,
        user_id,
        job_key,
        attribution_code,
        sample_flag(flags, 'is_idle') as is_idle,
        thermal_slowdown(clock_event_mask) as is_thermal,
        sample_flag(flags, 'has_process') as has_process,
        clock_event_mask,
        temp_gpu_c,
        sm_clock_mhz,
        sample_flag(flags, 'starts_idle_episode') as starts_idle_episode,
        sample_flag(flags, 'starts_thermal_event') as starts_thermal_event,
    from samples
    where sample_flag(flags, 'is_idle') or thermal_slowdown(clock_event_mask)
),

starts as (
    -- each sample that starts a run, with the latest start of each kind at or before it
    select
        series_id,
        ts,
        max(case when starts_idle_episode then ts end) over series_so_far as idle_start_ts,
        max(case when starts_thermal_event then ts end) over series_so_far
            as thermal_start_ts,
    from run_samples
    where starts_idle_episode or starts_thermal_event
    window series_so_far as (partition by series_id order by ts)
),

keyed as (
    -- No start of either kind lies between a sample and the latest start before it, so
    -- that start's latest idle and thermal starts are the sample's too: one as-of join.
    select
        run_samples.*,
        case
            when run_samples.is_idle
                then coalesce(starts.idle_start_ts, '-infinity'::timestamptz)
        end as idle_run_start_ts,
        case
            when run_samples.is_thermal
                then coalesce(starts.thermal_start_ts, '-infinity'::timestamptz)
        end as thermal_run_start_ts,
    from run_samples
    asof left join starts
        on starts.series_id = run_samples.series_id and run_samples.ts >= starts.ts
),

pieces as (
    select
        idle_run_start_ts,
        thermal_run_start_ts,
        series_id,
        day,
        hour,
        host_id,
        arg_min_null(gpu_index, ts) as first_gpu_index,
        arg_min_null(team_id, ts) as first_team_id,
        arg_min_null(attribution_code, ts) as first_attribution_code,
        arg_min_null(user_id, ts) as first_user_id,
        arg_min_null(job_key, ts) as first_job_key,
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
    group by idle_run_start_ts, thermal_run_start_ts, series_id, day, hour, host_id, job_key
),

pieces_with_ids as (
    -- as id_names (sql/_macros.sql) takes them
    select
        * exclude (first_team_id, first_user_id, first_job_key),
        first_team_id as team_id,
        first_user_id as user_id,
        first_job_key as job_key,
    from pieces
),

named_pieces as (
    select * from id_names(pieces_with_ids)
),

final as (
    select
        gpu_uuid,
        gpu_name,
        idle_run_start_ts,
        thermal_run_start_ts,
        day,
        hour,
        host,
        cluster,
        first_gpu_index,
        team as first_team,
        attribution_name(first_attribution_code) as first_attributed_by,
        "user" as first_user,
        job_id as first_job_id,
        first_ts,
        first_interval_s,
        last_ts,
        seconds,
        samples,
        has_process,
        max_temp_gpu_c,
        min_sm_clock_mhz,
        reasons_mask,
    from named_pieces
)

select * from final
