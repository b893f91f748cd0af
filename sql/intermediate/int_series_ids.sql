-- One row per GPU series: a small integer id and the GPU's model name. The window model
-- partitions by the integer and samples_attributed_rows stores it instead of the uuid and
-- name strings. Ids are kept across builds in build_state.series (gpufleet/warehouse/build/ids.py).
-- A MIG device's series has its GPU's UUID (parent_gpu_uuid) and the part of a GPU-hour an
-- hour of it counts (mig_share: its slice, stg_samples.gpu_share); a GPU's has neither.
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
        max(parent_gpu_uuid) as parent_gpu_uuid,
        max(gpu_share) filter (where parent_gpu_uuid is not null) as mig_share,
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
        parent_gpu_uuid,
        mig_share,
    from numbered
)

select * from final
