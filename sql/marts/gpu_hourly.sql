-- Per local day and hour, GPU, team and host: observed, measured and busy seconds, for the
-- report's utilization heatmaps (a small table instead of a week of samples). A table: an
-- incremental build replaces a GPU's rows from the first day with new samples on.
with samples as (
    select * from samples_attributed
),

final as (
    select
        day,
        hour,
        gpu_uuid,
        team,
        host,
        count(*) as samples,
        sum(interval_s)::double as observed_s,
        coalesce(sum(interval_s) filter (where gpu_util_pct is not null), 0)::double
            as utilization_s,
        coalesce(sum(gpu_util_pct::double / 100 * interval_s), 0) as busy_s,
    from samples
    group by day, hour, gpu_uuid, team, host
)

select * from final
