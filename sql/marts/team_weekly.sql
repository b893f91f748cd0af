-- The team_daily measures per ISO week (of the local dates) and team: sums of the same
-- samples, so each figure equals the sum of the team's daily figures; gpus is distinct
-- over the week.
with gpu_team_rows as (
    select * exclude (day) from gpu_team_daily
),

alloc_only_rows as (
    select * exclude (day, host, jobs) from alloc_only_daily
),

final as (
    select * from team_measures(gpu_team_rows, alloc_only_rows)
)

select * from final
