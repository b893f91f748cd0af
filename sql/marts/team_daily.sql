-- GPU usage, idle time, waste and energy per local day and team (docs/reference.md#measures):
-- the measures of team_measures (sql/_macros.sql), the same as team_weekly's, with the
-- GPU-hours allocated on hosts without samples (alloc_only_daily).
with gpu_team_rows as (
    select * exclude (iso_week, week_start) from gpu_team_daily
),

alloc_only_rows as (
    select * exclude (iso_week, week_start, host, jobs) from alloc_only_daily
),

final as (
    select * from team_measures(gpu_team_rows, alloc_only_rows)
)

select * from final
