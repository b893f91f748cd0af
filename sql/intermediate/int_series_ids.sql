-- One row per GPU series: a small integer id and the GPU's model name. The window model
-- partitions by the integer and samples_attributed_rows stores it instead of the uuid and
-- name strings. Ids are kept across builds in build_state.series (gpufleet/warehouse/ids.py).
with samples as (
    select * from stg_samples
),

known as (
    select * from build_state.series
),

series as (
    select
        gpu_uuid,
        max(gpu_name) as gpu_name,
    from samples
    group by gpu_uuid
),

numbered as (
    select
        series.gpu_uuid,
        series.gpu_name,
        known.series_id as known_id,
        row_number() over (
            partition by known.series_id is null order by series.gpu_uuid
        ) as n,
    from series
    left join known on known.gpu_uuid = series.gpu_uuid
),

final as (
    select
        stable_id(known_id, (select max(series_id) from known), n)::bigint as series_id,
        gpu_uuid,
        gpu_name,
    from numbered
)

select * from final
