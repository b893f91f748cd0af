-- Per local day and host at its site (cluster: two sites' hosts of one name are two hosts): how many GPUs reported, how much, and from when to when
-- (spotting hosts whose collector stopped).
with gpu_team_rows as (
    select * from gpu_team_daily
),

host_sums as (
    select
        day,
        cluster,
        host,
        count(distinct gpu_uuid) as gpus,
        sum(samples)::bigint as samples,
        sum(observed_s) as observed_s,
        min(first_ts) as first_ts,
        max(last_ts) as last_ts,
    from gpu_team_rows
    group by day, cluster, host
),

final as (
    select
        day,
        cluster,
        host,
        gpus,
        samples,
        observed_s / 3600 as hours_observed,
        first_ts,
        last_ts,
    from host_sums
)

select * from final
