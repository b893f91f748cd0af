-- One row per GPU series: a small integer id and the GPU's model name. The window model
-- partitions by the integer and carries it instead of the uuid and name strings, which
-- are joined back after the windows (a narrower sort is much faster).
with samples as (
    select * from stg_samples
),

series as (
    select
        gpu_uuid,
        max(gpu_name) as gpu_name,
    from samples
    group by gpu_uuid
),

final as (
    select
        (row_number() over (order by gpu_uuid))::bigint as series_id,
        gpu_uuid,
        gpu_name,
    from series
)

select * from final
