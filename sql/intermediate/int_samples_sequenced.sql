-- materialized: temp_view
-- The gaps of gaps-and-islands, once for idle episodes and thermal events alike. Per series
-- (gpu_uuid ordered by ts), from each sample and the one before it: whether it is
-- contiguous, its energy, and whether it starts an idle run (idle, and not continuing an
-- idle run of the same team and attribution) or a thermal run (the definitions of
-- docs/reference.md: #contiguous, #energy, #idle-episode, #thermal-event).
-- run_pieces keys the runs (the islands).
-- A view: samples_attributed_rows materializes it once; per-sample temp tables would not
-- fit in memory at fleet scale. The series, host, team, user, job, status and attribution
-- stay integers (the window sorts integers, and the table stores no name 60 M times); the
-- samples_attributed view turns them into names, and derives the ISO week from the day.
with samples as (
    select * from int_samples_attributed
),

local_days as (
    select * from int_local_days
),

with_previous as (
    select
        *,
        lag(ts) over series as previous_ts,
        lag(energy_mj) over series as previous_energy_mj,
        lag(is_idle) over series as previous_is_idle,
        lag(team_id) over series as previous_team_id,
        lag(attribution_code) over series as previous_attribution_code,
        lag(is_thermal) over series as previous_is_thermal,
        lag(ecc_uncorrected_volatile) over series as previous_ecc_uncorrected,
        lag(ecc_corrected_volatile) over series as previous_ecc_corrected,
        lag(pcie_replay_count) over series as previous_pcie_replay_count,
    from samples
    window series as (partition by series_id order by ts)
),

deduplicated as (
    -- a repeated (gpu_uuid, ts) counts once
    select * from with_previous
    where previous_ts is distinct from ts
),

with_contiguity as (
    select
        *,
        epoch_us(ts) as ts_us,
        coalesce(
            epoch_us(ts) - epoch_us(previous_ts)
            <= getvariable('max_gap_factor') * interval_s * 1000000,
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
            else power_w::double * interval_s
        end as energy_j,
        coalesce(is_idle, false)
        and not coalesce(
            is_contiguous
            and previous_is_idle
            and team_id = previous_team_id
            and attribution_code = previous_attribution_code,
            false
        ) as is_idle_run_start,
        is_thermal and not coalesce(is_contiguous and previous_is_thermal, false)
            as is_thermal_run_start,
    from with_contiguity
),

final as (
    select
        with_run_starts.series_id,
        with_run_starts.ts,
        with_run_starts.host_id,
        with_run_starts.gpu_index,
        with_run_starts.interval_s,
        with_run_starts.status_id,
        with_run_starts.gpu_util_pct,
        with_run_starts.team_id,
        with_run_starts.user_id,
        with_run_starts.job_key,
        with_run_starts.attribution_code,
        with_run_starts.energy_j,
        local_days.day,
        local_days.hour,
        sample_flags(
            with_run_starts.is_idle,
            with_run_starts.has_process,
            with_run_starts.is_contiguous,
            with_run_starts.is_idle_run_start,
            with_run_starts.is_thermal_run_start
        ) as flags,
        with_run_starts.clock_event_mask,
        with_run_starts.temp_gpu_c,
        with_run_starts.sm_clock_mhz,
        with_run_starts.mem_used_bytes,
        with_run_starts.mem_total_bytes,
        with_run_starts.gpu_share,
        with_run_starts.sm_active_pct,
        with_run_starts.tensor_active_pct,
        with_run_starts.dram_active_pct,
        -- health (docs/reference.md#drain): a sample's XIDs, how much each counter grew
        -- since the sample before (counter_growth), and its flags
        with_run_starts.xid_errors,
        counter_growth(
            with_run_starts.ecc_uncorrected_volatile, with_run_starts.previous_ecc_uncorrected
        ) as ecc_uncorrected_new,
        counter_growth(
            with_run_starts.ecc_corrected_volatile, with_run_starts.previous_ecc_corrected
        ) as ecc_corrected_new,
        counter_growth(
            with_run_starts.pcie_replay_count, with_run_starts.previous_pcie_replay_count
        ) as pcie_replays_new,
        health_flags(
            with_run_starts.remapped_rows_pending,
            with_run_starts.remapped_rows_failure,
            with_run_starts.retired_pages_pending
        ) as health_flags,
    from with_run_starts
    -- the local day and hour in the zone of the sample's site (int_local_days)
    inner join local_days
        on local_days.bucket = with_run_starts.ts_us // 900000000
        and local_days.timezone_id = with_run_starts.timezone_id
    -- No order by: the window emits each series' rows together and in time order, and the
    -- join above keeps that order while it probes with the samples (the build turns off
    -- DuckDB's build_side_probe_side: see flows/models.prepare), so
    -- samples_attributed_rows is stored as compactly as a sort of 60 M rows would make it.
)

select * from final
