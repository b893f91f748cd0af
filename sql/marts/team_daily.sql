-- GPU usage, idle time, waste and energy per local day and team (docs/reference.md#measures):
-- the measures of team_measures (sql/_macros.sql), the same as team_weekly's.
with gpu_team_rows as (
    select * exclude (iso_week, week_start) from gpu_team_daily
),

final as (
    select * from team_measures(gpu_team_rows)
)

select * from final
