-- The local day and hour of every 15-minute UTC bucket that has samples, in each time zone
-- of a site among the hosts (int_hosts.timezone_id: the configured timezone, or a site's
-- own, docs/sites.md).
-- Time zone offsets are whole quarter hours, so a bucket never straddles a local hour;
-- samples find their day by joining on `ts_us // 900000000` and their host's zone instead
-- of converting each ts.
with samples as (
    select * from stg_samples
),

hosts as (
    select * from int_hosts
),

buckets as (
    -- only the buckets that have samples: a stray timestamp years away costs one row
    select distinct ts_us // 900000000 as bucket,
    from samples
),

zones as (
    select distinct timezone_id, timezone,
    from hosts
),

local_dates as (
    select
        buckets.bucket,
        zones.timezone_id,
        timezone(zones.timezone, to_timestamp(buckets.bucket * 900)) as local_time,
        local_time::date as day,
    from buckets
    cross join zones
),

final as (
    select
        bucket,
        timezone_id,
        day,
        hour(local_time) as hour,
    from local_dates
)

select * from final
