-- materialized: temp_view
-- The collector samples as the models use them: integer epoch microseconds for the series
-- arithmetic, the processes list with its count (int_samples_attributed picks the
-- process a sample is attributed to; int_process_owners reads every process), and the
-- Slurm job that holds the GPU by the scheduler's own record (alloc_job_id, alloc_user;
-- empty text is no job), and the site its writer recorded or its host=<host>@<site> folder
-- named (cluster; empty text: none).
-- A MIG-enabled GPU writes its own row and one per MIG device at the same ts
-- (docs/reference.md#mig-gpu-hours): `gpu_share` is the part of a GPU-hour a row counts, its
-- slice (mig_slice_fraction; unknown: an equal part of its GPU's devices at that ts) for a MIG
-- device, 0 for the GPU's own row when it has MIG devices (its processes and job are its
-- devices': it is attributed by its host alone), 1 otherwise. A MIG device's row keeps its
-- GPU's UUID (parent_gpu_uuid): an allocation may name either (int_samples_attributed).
-- `not materialized`: read twice below (the MIG devices, then every sample), DuckDB would
-- otherwise hold every column of every sample, processes included, before the join and
-- spill it to disk: about a quarter of a full build's CPU (bench/sizing.md). Read twice,
-- the count reads only the two columns it needs.
with source as not materialized (
    select * from samples
),

mig_devices as (
    -- the MIG devices of each GPU at each tick
    select
        parent_gpu_uuid,
        ts,
        count(*) as devices,
    from source
    where parent_gpu_uuid is not null
    group by all
),

with_devices as (
    select
        source.*,
        source.parent_gpu_uuid is null and mig_devices.devices is not null as is_mig_parent,
        case
            when source.parent_gpu_uuid is not null
                then coalesce(source.mig_slice_fraction::double, 1.0 / mig_devices.devices)
            when mig_devices.devices is not null then 0.0
            else 1.0
        end::float as gpu_share,
    from source
    left join mig_devices
        on mig_devices.parent_gpu_uuid = coalesce(source.parent_gpu_uuid, source.gpu_uuid)
        and mig_devices.ts = source.ts
),

renamed as (
    select
        gpu_uuid,
        ts,
        epoch_us(ts) as ts_us,
        interval_s,
        host,
        gpu_index,
        gpu_name,
        status,
        gpu_util_pct,
        power_w,
        energy_mj,
        temp_gpu_c,
        sm_clock_mhz,
        clock_event_mask,
        case when not is_mig_parent then processes end as processes,
        case when not is_mig_parent then coalesce(len(processes), 0) else 0 end as process_count,
        case when not is_mig_parent then nullif(alloc_job_id, '') end as alloc_job_id,
        case when not is_mig_parent then nullif(alloc_user, '') end as alloc_user,
        nullif(cluster, '') as cluster,
        mem_used_bytes,
        mem_total_bytes,
        gpu_share,
        is_mig_parent,
        parent_gpu_uuid,
        mig_slice_fraction,
        sm_active_pct,
        tensor_active_pct,
        dram_active_pct,
        xid_errors,
        ecc_uncorrected_volatile,
        ecc_corrected_volatile,
        pcie_replay_count,
        remapped_rows_pending,
        remapped_rows_failure,
        retired_pages_pending,
    from with_devices
),

final as (
    select
        gpu_uuid,
        ts,
        ts_us,
        interval_s,
        host,
        gpu_index,
        gpu_name,
        status,
        gpu_util_pct,
        power_w,
        energy_mj,
        temp_gpu_c,
        sm_clock_mhz,
        clock_event_mask,
        processes,
        process_count,
        alloc_job_id,
        alloc_user,
        cluster,
        mem_used_bytes,
        mem_total_bytes,
        gpu_share,
        is_mig_parent,
        parent_gpu_uuid,
        mig_slice_fraction,
        sm_active_pct,
        tensor_active_pct,
        dram_active_pct,
        xid_errors,
        ecc_uncorrected_volatile,
        ecc_corrected_volatile,
        pcie_replay_count,
        remapped_rows_pending,
        remapped_rows_failure,
        retired_pages_pending,
    from renamed
)

select * from final
