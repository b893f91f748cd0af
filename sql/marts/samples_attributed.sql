-- Every sample with its attribution, energy, local day and week, and its idle episode and
-- thermal event if any.
with series_runs as (
    select * from int_series_runs
),

final as (
    select * from series_runs
)

select * from final
