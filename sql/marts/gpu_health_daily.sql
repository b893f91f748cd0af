-- materialized: view
-- Per local day and GPU: the health its own samples report (docs/reference.md#drain): the
-- XID critical errors seen, how much the ECC and PCIe replay counters grew, the row-remap
-- and page-retirement flags, and whether the GPU should be drained, with the reasons. A
-- view over gpu_hourly, which keeps each hour's XIDs, counter growth and flags: a build
-- brings it up to date with gpu_hourly, incremental or full. A MIG device (a series with a
-- parent_gpu_uuid, build_state.series) has no row: its GPU's own row carries the health.
with hours as (
    select * from gpu_hourly
),

mig_devices as (
    select gpu_uuid from build_state.series
    where parent_gpu_uuid is not null
),

gpu_days as (
    select
        day,
        gpu_uuid,
        -- a struct: arg_max skips a null cluster
        arg_max({'host': host, 'cluster': cluster}, last_ts) as place,
        arg_max(gpu_name, last_ts) as gpu_name,
        flatten(list(xid_errors)) as xid_events,
        sum(ecc_uncorrected_new) as ecc_uncorrected_new,
        sum(ecc_corrected_new) as ecc_corrected_new,
        sum(pcie_replays_new) as pcie_replays_new,
        bit_or(health_flags) as health_flags,
    from hours
    where gpu_uuid not in (select gpu_uuid from mig_devices)
    group by day, gpu_uuid
),

with_flags as (
    select
        day,
        place.cluster,
        place.host,
        gpu_uuid,
        gpu_name,
        list_sort(list_distinct(xid_events)) as xid_errors,
        len(xid_events) as xid_count,
        ecc_uncorrected_new,
        ecc_corrected_new,
        pcie_replays_new,
        health_flags & 1 != 0 as remapped_rows_pending,
        health_flags & 2 != 0 as remapped_rows_failure,
        health_flags & 4 != 0 as retired_pages_pending,
    from gpu_days
),

with_reasons as (
    -- the drain rule's reasons, in the rule's order (an XID's by code)
    select
        *,
        list_filter(
            [
                case when remapped_rows_failure then 'remap_failure' end,
                case when remapped_rows_pending then 'remap_pending' end,
                case when ecc_uncorrected_new > 0 then 'ecc_uncorrected' end,
            ],
            lambda reason: reason is not null
        )
        || list_transform(
            list_filter(
                xid_errors,
                lambda code: list_contains([48, 63, 64, 74, 79, 92, 94, 95, 119, 120], code)
            ),
            lambda code: 'xid_' || code
        )
        || list_filter(
            [case when retired_pages_pending then 'pages_pending' end],
            lambda reason: reason is not null
        ) as drain_reasons,
    from with_flags
),

final as (
    select
        day,
        cluster,
        host,
        gpu_uuid,
        gpu_name,
        xid_errors,
        xid_count,
        ecc_uncorrected_new,
        ecc_corrected_new,
        pcie_replays_new,
        remapped_rows_pending,
        remapped_rows_failure,
        retired_pages_pending,
        len(drain_reasons) > 0 as drain,
        drain_reasons,
    from with_reasons
)

select * from final
