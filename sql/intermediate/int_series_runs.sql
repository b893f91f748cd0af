-- materialized: temp_view
-- The islands of gaps-and-islands: the idle and thermal samples numbered into runs. A run
-- is the samples from one that starts it (int_samples_sequenced) up to the next start of
-- the same kind, so its number is the running count of starts; idle and thermal samples
-- are all that need numbering, so the window sorts only them.
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
        samples.* exclude (status, gpu_util_pct, energy_j, iso_week, week_start, is_contiguous),
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

final as (
    select
        * exclude (series_id, idle_run_number, thermal_run_number),
        case
            when is_idle then (series_id << 32) + idle_run_number::bigint
        end as idle_episode_id,
        case
            when is_thermal then (series_id << 32) + thermal_run_number::bigint
        end as thermal_event_id,
    from numbered
)

select * from final
