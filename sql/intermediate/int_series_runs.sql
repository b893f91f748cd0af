-- materialized: temp_view
-- The one gaps-and-islands model. Per series (gpu_uuid ordered by ts): whether each sample is
-- contiguous with the previous one, its energy, and the idle run and thermal run it belongs
-- to (CONTRACT 6). Idle and thermal models aggregate these runs; nothing else windows.
-- A view: samples_attributed materializes it once; per-sample temp tables would not fit
-- in memory at fleet scale.
with samples as (
    select * from int_samples_attributed
),

with_previous as (
    select
        *,
        lag(ts_us) over series as previous_ts_us,
        lag(energy_mj) over series as previous_energy_mj,
        lag(is_idle) over series as previous_is_idle,
        lag(team) over series as previous_team,
        lag(attributed_by) over series as previous_attributed_by,
        lag(is_thermal) over series as previous_is_thermal,
    from samples
    window series as (partition by series_id order by ts_us)
),

deduplicated as (
    -- a repeated (gpu_uuid, ts) counts once
    select * from with_previous
    where previous_ts_us is distinct from ts_us
),

with_contiguity as (
    select
        *,
        coalesce(
            ts_us - previous_ts_us <= getvariable('max_gap_factor') * interval_s * 1000000,
            false
        ) as is_contiguous,
    from deduplicated
),

with_run_starts as (
    select
        *,
        case
            when is_contiguous
                and energy_mj is not null
                and previous_energy_mj is not null
                and energy_mj >= previous_energy_mj
                then (energy_mj - previous_energy_mj) / 1000.0
            else power_w * interval_s
        end as energy_j,
        coalesce(is_idle, false)
        and not coalesce(
            is_contiguous
            and previous_is_idle
            and team = previous_team
            and attributed_by = previous_attributed_by,
            false
        ) as is_idle_run_start,
        is_thermal and not coalesce(is_contiguous and previous_is_thermal, false)
            as is_thermal_run_start,
    from with_contiguity
),

numbered as (
    select
        *,
        sum(is_idle_run_start::integer) over series as idle_run_number,
        sum(is_thermal_run_start::integer) over series as thermal_run_number,
    from with_run_starts
    window series as (
        partition by series_id order by ts_us rows between unbounded preceding and current row
    )
),

final as (
    select
        gpu_uuid,
        ts,
        host,
        gpu_index,
        gpu_name,
        interval_s,
        status,
        gpu_util_pct,
        team,
        "user",
        job_id,
        attributed_by,
        is_idle,
        energy_j,
        day,
        iso_week,
        week_start,
        has_process,
        is_contiguous,
        is_thermal,
        clock_event_mask,
        temp_gpu_c,
        sm_clock_mhz,
        -- ids: the series in the high 32 bits, the run's number within the series below
        case when is_idle then (series_id << 32) + idle_run_number::bigint end as idle_episode_id,
        case when is_thermal then (series_id << 32) + thermal_run_number::bigint end as thermal_event_id,
    from numbered
)

select * from final
