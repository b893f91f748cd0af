-- The local day and hour of every 15-minute UTC bucket that has samples.
-- Time zone offsets are whole quarter hours, so a bucket never straddles a local hour;
-- samples find their day by joining on `ts_us // 900000000` instead of converting each ts.
with samples as (
    select * from stg_samples
),

buckets as (
    -- only the buckets that have samples: a stray timestamp years away costs one row
    select distinct ts_us // 900000000 as bucket,
    from samples
),

local_dates as (
    select
        bucket,
        timezone(getvariable('timezone'), to_timestamp(bucket * 900)) as local_time,
        local_time::date as day,
    from buckets
),

final as (
    select
        bucket,
        day,
        hour(local_time) as hour,
    from local_dates
)

select * from final
