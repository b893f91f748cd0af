-- A small integer per GPU series: partitioning the window models by an integer is cheaper
-- than by the uuid string, and it prefixes the episode and event ids.
with samples as (
    select * from stg_samples
),

series as (
    select distinct gpu_uuid,
    from samples
),

final as (
    select
        gpu_uuid,
        (row_number() over (order by gpu_uuid))::bigint as series_id,
    from series
)

select * from final
