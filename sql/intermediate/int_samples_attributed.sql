-- materialized: temp_view
-- Every sample with its attribution (docs/reference.md#attribution: an allocation row, else
-- the job holding the GPU by the scheduler's record in the sample, else process, else host,
-- else none) and whether it is idle or thermally throttled. Names the series window would
-- have to sort are carried as small integers (series, host, team, user, job, status,
-- attribution code: gpufleet/warehouse/build/ids.py); samples_attributed_rows stores them so.
-- A view: it is read once, by the series model, so it is never held in memory whole.
with samples as (
    select * from stg_samples
),

series_ids as (
    select * from int_series_ids
),

hosts as (
    select * from int_hosts
),

teams as (
    select * from int_teams
),

users as (
    select * from int_users
),

-- users and hosts with dated users.csv / hosts.csv rows: their team per period (empty
-- without valid_from), from the local midnights of the sample's site (a user's per zone)
user_teams as (
    select * from int_user_teams
),

host_teams as (
    select * from int_host_teams
),

job_teams as (
    select * from int_job_teams
),

statuses as (
    select * from int_statuses
),

allocation_segments as (
    select * from int_allocation_segments
),

allocation_holders as (
    select
        host_id,
        gpu_index,
        gpu_uuid,
        hour,
        start_us,
        end_us,
        {
            'job_key': job_key,
            'user_id': user_id,
            'team_id': team_id,
            'team_from_users': team_from_users,
        } as holder,
    from allocation_segments
),

with_host as (
    select
        samples.*,
        hosts.host_id,
        hosts.cluster as host_cluster,
        hosts.timezone_id,
        case
            when host_teams.host_id is not null then host_teams.team_id else hosts.team_id
        end as host_team_id,
    from samples
    -- a sample's host at its site: its own cluster, else its host's by hosts.csv (int_hosts)
    inner join hosts
        on hosts.host = samples.host
        and hosts.cluster is not distinct from coalesce(samples.cluster, hosts.rule_cluster)
    left join host_teams
        on host_teams.host_id = hosts.host_id
        and samples.ts_us >= host_teams.from_us
        and samples.ts_us < host_teams.to_us
),

with_allocation as (
    -- rule 1: an allocation row that names the sample's MIG device or GPU by UUID, else (a
    -- MIG device) one that names its GPU by UUID, else one of its host and GPU index
    select
        with_host.*,
        coalesce(own_device.holder, whole_gpu.holder, gpu_index.holder) as allocation,
    from with_host
    -- (a MIG GPU's own row: its devices are allocated, stg_samples.gpu_share)
    left join allocation_holders as own_device
        on not with_host.is_mig_parent
        and own_device.gpu_uuid = with_host.gpu_uuid
        and own_device.host_id = with_host.host_id
        and own_device.hour = with_host.ts_us // 3600000000
        and with_host.ts_us > own_device.start_us
        and (own_device.end_us is null or with_host.ts_us <= own_device.end_us)
    left join allocation_holders as whole_gpu
        on whole_gpu.gpu_uuid = with_host.parent_gpu_uuid
        and whole_gpu.host_id = with_host.host_id
        and whole_gpu.hour = with_host.ts_us // 3600000000
        and with_host.ts_us > whole_gpu.start_us
        and (whole_gpu.end_us is null or with_host.ts_us <= whole_gpu.end_us)
    left join allocation_holders as gpu_index
        on not with_host.is_mig_parent
        and gpu_index.gpu_uuid is null
        and gpu_index.host_id = with_host.host_id
        and gpu_index.gpu_index = with_host.gpu_index
        and gpu_index.hour = with_host.ts_us // 3600000000
        and with_host.ts_us > gpu_index.start_us
        and (gpu_index.end_us is null or with_host.ts_us <= gpu_index.end_us)
),

with_holder as (
    select
        with_allocation.* exclude (allocation),
        allocation is not null as has_allocation,
        allocation.job_key as allocation_job_key,
        allocation.user_id as allocation_user_id,
        allocation.team_id as allocation_team_id,
        allocation.team_from_users as allocation_team_from_users,
    from with_allocation
),

with_top_process as (
    -- The process a sample is attributed to (docs/reference.md#attribution, rule 2): of
    -- several, the one holding the most memory, ties to the lowest pid (the maximum of
    -- (memory, -pid)).
    -- Only a sample neither an allocation row nor the scheduler's record in the sample
    -- covers is attributed by process, so only its top process is worked out. A single
    -- process is taken as it is: building the sort key for it too would triple the cost.
    select
        with_holder.* exclude (processes),
        case
            when has_allocation or alloc_job_id is not null or process_count = 0 then null
            when process_count = 1
                then {
                    'used_mem_bytes': coalesce(processes[1].used_mem_bytes, -1),
                    'negated_pid': -(processes[1].pid::bigint),
                    'user': processes[1]."user",
                    'job_id': processes[1].job_id,
                }
            else list_max(
                list_transform(
                    processes,
                    lambda process: {
                        'used_mem_bytes': coalesce(process.used_mem_bytes, -1),
                        'negated_pid': -(process.pid::bigint),
                        'user': process."user",
                        'job_id': process.job_id,
                    }
                )
            )
        end as top_process,
    from with_holder
),

with_evidence as (
    -- The job and user of rule 1b (the scheduler's record in the sample) or of rule 2 (the
    -- top process): one lookup of each for both rules.
    select
        * exclude (alloc_user),
        case
            when has_allocation then null
            when alloc_job_id is not null then alloc_job_id
            else top_process.job_id
        end as evidence_job_id,
        case
            when has_allocation then null
            when alloc_job_id is not null then alloc_user
            else top_process."user"
        end as evidence_user,
    from with_top_process
),

attributed as (
    select
        with_evidence.*,
        -- 1 allocation (an allocation row, or the scheduler's record), 2 process, 3 host,
        -- 4 none
        case
            when has_allocation or alloc_job_id is not null then 1
            when process_count > 0 then 2
            when host_team_id is not null then 3
            else 4
        end::utinyint as attribution_code,
        -- rules 1b and 2: the job's Slurm team, else users.csv, else (unmapped)
        -- a user with dated users.csv rows: the team of the sample's period (user_teams)
        case
            when has_allocation and allocation_team_from_users and user_teams.user_id is not null
                then coalesce(
                    user_teams.team_id, (select team_id from teams where team = '(unmapped)')
                )
            when has_allocation then allocation_team_id
            when alloc_job_id is not null or process_count > 0
                then coalesce(
                    job_teams.team_id,
                    case
                        when user_teams.user_id is not null then user_teams.team_id
                        else users.team_id
                    end,
                    (select team_id from teams where team = '(unmapped)')
                )
            when host_team_id is not null then host_team_id
            else (select team_id from teams where team = '(unallocated)')
        end as team_id,
        case
            when has_allocation then allocation_user_id
            when alloc_job_id is not null or process_count > 0 then users.user_id
        end as user_id,
        case
            when has_allocation then allocation_job_key
            when alloc_job_id is not null or process_count > 0 then job_teams.job_key
        end as job_key,
    from with_evidence
    left join users on users."user" = with_evidence.evidence_user
    left join user_teams
        on user_teams.user_id = case
            when with_evidence.has_allocation
                then case
                    when with_evidence.allocation_team_from_users
                        then with_evidence.allocation_user_id
                end
            else users.user_id
        end
        and user_teams.timezone_id = with_evidence.timezone_id
        and with_evidence.ts_us >= user_teams.from_us
        and with_evidence.ts_us < user_teams.to_us
    left join job_teams
        on job_teams.job_id = with_evidence.evidence_job_id
        and with_evidence.ts_us >= job_teams.from_us
        and with_evidence.ts_us < job_teams.to_us
        -- an id of two Slurm clusters: the spans of the host's site's cluster (int_job_teams)
        and case
            when job_teams.site is null
                then with_evidence.host_cluster is null
                or not list_contains(job_teams.own_sites, with_evidence.host_cluster)
            else job_teams.site = with_evidence.host_cluster
        end
),

final as (
    select
        series_ids.series_id,
        attributed.ts,
        attributed.interval_s,
        attributed.host_id,
        attributed.timezone_id,
        attributed.gpu_index,
        statuses.status_id,
        attributed.gpu_util_pct,
        attributed.team_id,
        attributed.user_id,
        attributed.job_key,
        attributed.attribution_code,
        -- a MIG device's sample is never idle: idle episodes and waste are whole GPUs'
        -- (docs/reference.md#mig-gpu-hours); its utilization is null from the collector
        case when attributed.gpu_share = 1 then attributed.gpu_util_pct end
            < getvariable('idle_threshold_pct') as is_idle,
        attributed.process_count > 0 as has_process,
        thermal_slowdown(attributed.clock_event_mask) as is_thermal,
        attributed.clock_event_mask,
        attributed.temp_gpu_c,
        attributed.sm_clock_mhz,
        attributed.power_w,
        attributed.energy_mj,
        attributed.mem_used_bytes,
        attributed.mem_total_bytes,
        attributed.gpu_share,
        attributed.sm_active_pct,
        attributed.tensor_active_pct,
        attributed.dram_active_pct,
        attributed.xid_errors,
        attributed.ecc_uncorrected_volatile,
        attributed.ecc_corrected_volatile,
        attributed.pcie_replay_count,
        attributed.remapped_rows_pending,
        attributed.remapped_rows_failure,
        attributed.retired_pages_pending,
    from attributed
    inner join series_ids on series_ids.gpu_uuid = attributed.gpu_uuid
    inner join statuses on statuses.status = attributed.status
)

select * from final
