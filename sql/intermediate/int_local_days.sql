-- The local day, ISO week and week start of every 15-minute UTC bucket the samples span.
-- Time zone offsets are whole quarter hours, so a bucket never straddles a local midnight;
-- samples find their day by joining on `ts_us // 900000000` instead of converting each ts.
with samples as (
    select * from stg_samples
),

bounds as (
    select
        min(ts_us) // 900000000 as first_bucket,
        max(ts_us) // 900000000 as last_bucket,
    from samples
),

buckets as (
    select bucket.generate_series as bucket,
    from bounds, generate_series(bounds.first_bucket, bounds.last_bucket) as bucket
),

local_dates as (
    select
        bucket,
        timezone(getvariable('timezone'), to_timestamp(bucket * 900))::date
            as day,
    from buckets
),

final as (
    select
        bucket,
        day,
        strftime(day, '%G-W%V') as iso_week,
        day - (isodow(day) - 1)::integer as week_start,
    from local_dates
)

select * from final
