-- One row per GPU series: a small integer id and the GPU's model name. The window model
-- partitions by the integer and samples_attributed_rows stores it instead of the uuid and
-- name strings. Ids are kept across builds in build_state.series (gpufleet/warehouse/build/ids.py).
with samples as (
    select * from stg_samples
),

known as (
    select gpu_uuid as name, series_id as id, from build_state.series
),

series as (
    select
        gpu_uuid as name,
        max(gpu_name) as gpu_name,
    from samples
    group by gpu_uuid
),

numbered as (
    select * from stable_ids(series, known)
),

final as (
    select
        id::bigint as series_id,
        name as gpu_uuid,
        gpu_name,
    from numbered
)

select * from final
