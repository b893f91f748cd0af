-- materialized: view
-- One row per job and GPU model (docs/reference.md#job-efficiency): what the job was
-- allocated, what its samples show it used, its idle and waste time and cost, peak memory
-- and energy. Every job with attributed samples or allocation rows; the measures are
-- team_daily's over the job's samples of that model, so summed over jobs they equal
-- team_daily's over the samples with a job. A view over small persistent tables (the
-- build's temp macros and models are gone when it is read): gpu_hourly and run_pieces are
-- grouped by job, the waste cost is each waste piece's share of its episode's waste_usd
-- (no price lookup here), and the Slurm and allocation facts are read from the raw tables.
-- A job is its id at its site (docs/sites.md): the samples of job 4242 at site-a and at
-- site-b are two jobs, each with the allocation rows and Slurm record of its cluster (a
-- row or record of no cluster, or of a cluster that no site of the id's samples is named
-- after, belongs to each of them); an id whose samples have no site is one job, as before.
-- A Slurm job with neither samples nor allocation rows (nodes without a collector, a job
-- squeue never saw) is a job too: its record's GPUs over its time (docs/reference.md
-- #allocated-gpu-hours). What is still running counts up to its last sample, else up to
-- the import that last saw it running (its record's seen_ts).
with hours as (
    select * from gpu_hourly
),

pieces as (
    select * from run_pieces
),

episodes as (
    select * from idle_episodes
),

allocation_rows as (
    select * from allocations
),

slurm_job_rows as (
    select * from slurm_jobs
),

series as (
    select * from build_state.series
),

reference_users as (
    select * from ref_users
),

job_hours as (
    select * from hours
    where job_id is not null
),

people as (
    -- the team and user the job's samples of the model were attributed to (one per job in
    -- practice; else the one with the most hours)
    select
        cluster,
        job_id,
        gpu_name,
        team,
        "user",
        sum(observed_s) as observed_s,
    from job_hours
    group by all
),

sample_people as (
    select
        cluster,
        job_id,
        gpu_name,
        arg_max(team, {'observed_s': observed_s, 'team': team}) as team,
        arg_max("user", {'observed_s': observed_s, 'user': "user"})
            filter (where "user" is not null) as "user",
    from people
    group by all
),

sample_sums as (
    select
        -- the site of the job's samples' hosts (null: hosts of no site)
        cluster,
        job_id,
        gpu_name,
        sum(observed_s) as observed_s,
        sum(utilization_s) as utilization_s,
        sum(busy_s) as busy_s,
        sum(idle_s) as idle_s,
        sum(energy_j) as energy_j,
        sum(allocated_s) as allocated_s,
        sum(activity_s) as activity_s,
        sum(sm_active_s) as sm_active_s,
        sum(tensor_active_s) as tensor_active_s,
        sum(dram_active_s) as dram_active_s,
        max(max_mem_used_bytes) as max_mem_used_bytes,
        max(mem_total_bytes) as mem_total_bytes,
        count(distinct gpu_uuid) as gpus,
        min(first_ts) as first_ts,
        max(last_ts) as last_ts,
    from job_hours
    group by all
),

job_sites as (
    -- each job at its site, with its last sample
    select
        cluster,
        job_id,
        max(last_ts) as last_ts,
    from job_hours
    group by all
),

waste_sums as (
    -- the job's pieces of waste episodes; each piece's share of its episode's cost
    select
        pieces.cluster,
        pieces.first_job_id as job_id,
        pieces.gpu_name,
        sum(pieces.seconds) as waste_s,
        sum(episodes.waste_usd * pieces.seconds / episodes.idle_seconds) as waste_usd,
    from pieces
    inner join episodes
        on episodes.gpu_uuid = pieces.gpu_uuid
        and episodes.episode_id = (hash(pieces.gpu_uuid, pieces.idle_run_start_ts) >> 1)::bigint
    where pieces.idle_run_start_ts is not null
        and pieces.first_job_id is not null
        and episodes.is_waste
    group by all
),

job_allocations as (
    -- empty CSV cells are null, as the build reads them (stg_allocations)
    select
        nullif(trim(job_id), '') as job_id,
        nullif(trim("user"), '') as "user",
        nullif(trim(team), '') as team,
        host,
        gpu_index,
        nullif(trim(gpu_uuid), '') as gpu_uuid,
        start_ts,
        end_ts,
        nullif(trim(cluster), '') as cluster,
    from allocation_rows
    where nullif(trim(job_id), '') is not null
),

shared_allocations as (
    -- a row that names a MIG device holds its slice of a GPU (docs/reference.md#mig-gpu-hours)
    select
        job_allocations.*,
        coalesce(series.mig_share, 1.0) as gpu_share,
    from job_allocations
    left join series
        on series.gpu_uuid = job_allocations.gpu_uuid
        and series.parent_gpu_uuid is not null
),

record_seen as (
    -- when the import last saw each run of a job running
    select
        trim(job_id) as job_id,
        nullif(trim(cluster), '') as cluster,
        start_ts,
        max(seen_ts) as seen_ts,
    from slurm_job_rows
    group by all
),

sited_allocations as (
    -- each row with the job at each site it covers that has samples (its cluster's, or
    -- every site's for a row of no cluster or samples of hosts of no site), else alone
    select
        job_allocations.*,
        (
            select max(record_seen.seen_ts) from record_seen
            where record_seen.job_id = job_allocations.job_id
                and record_seen.start_ts = job_allocations.start_ts
                and record_seen.cluster is not distinct from job_allocations.cluster
        ) as seen_ts,
        case
            when job_sites.job_id is not null then job_sites.cluster
            else job_allocations.cluster
        end as key_cluster,
        job_sites.job_id is not null as has_samples,
        job_sites.last_ts,
    from shared_allocations as job_allocations
    left join job_sites
        on job_sites.job_id = job_allocations.job_id
        and (
            job_allocations.cluster is null
            or job_sites.cluster is null
            or job_sites.cluster = job_allocations.cluster
        )
),

allocation_sums as (
    -- an open row counts up to the job's last sample, else its record's seen_ts (none: 0)
    select
        job_allocations.key_cluster as cluster,
        job_allocations.job_id,
        bool_or(job_allocations.has_samples) as has_samples,
        count(
            distinct (
                job_allocations.host,
                coalesce(job_allocations.gpu_uuid, job_allocations.gpu_index::varchar)
            )
        ) as gpus,
        sum(
            job_allocations.gpu_share * greatest(
                coalesce(
                    epoch(
                        coalesce(
                            job_allocations.end_ts, job_allocations.last_ts, job_allocations.seen_ts
                        )
                        - job_allocations.start_ts
                    ),
                    0
                ),
                0
            )
        ) / 3600 as alloc_gpu_hours,
        min(job_allocations.start_ts) as start_ts,
        case when bool_and(job_allocations.end_ts is not null) then max(job_allocations.end_ts) end
            as end_ts,
        arg_max(job_allocations."user", job_allocations.start_ts)
            filter (where job_allocations."user" is not null) as "user",
        arg_max(job_allocations.team, job_allocations.start_ts)
            filter (where job_allocations.team is not null) as team,
        arg_max(job_allocations.cluster, job_allocations.start_ts)
            filter (where job_allocations.cluster is not null) as allocation_cluster,
    from sited_allocations as job_allocations
    group by all
),

latest_slurm_jobs as (
    -- a requeued job's latest start, per cluster
    select
        trim(job_id) as job_id,
        nullif(trim(cluster), '') as cluster,
        arg_max(
            {
                'cluster': nullif(trim(cluster), ''),
                'user': nullif(trim("user"), ''),
                'account': nullif(trim(account), ''),
                'partition': nullif(trim(partition), ''),
                'state': nullif(trim(state), ''),
                'team': nullif(trim(team), ''),
                'start_ts': start_ts,
                'end_ts': end_ts,
                'gpus': gpus,
                'seen_ts': seen_ts,
            },
            start_ts
        ) as job,
    from slurm_job_rows
    group by all
),

measured_or_placed as (
    select cluster, job_id, gpu_name, from sample_sums
    union all
    select cluster, job_id, null as gpu_name, from allocation_sums
    where not has_samples
),

keys as (
    select * from measured_or_placed
    union all
    -- a Slurm job known by its record alone, at its cluster
    select latest_slurm_jobs.cluster, latest_slurm_jobs.job_id, null as gpu_name,
    from latest_slurm_jobs
    where coalesce(latest_slurm_jobs.job.gpus, 0) > 0
        and not exists (
            select 1 from measured_or_placed
            where measured_or_placed.job_id = latest_slurm_jobs.job_id
                and (
                    measured_or_placed.cluster is null
                    or latest_slurm_jobs.cluster is null
                    or measured_or_placed.cluster = latest_slurm_jobs.cluster
                )
        )
),

key_jobs as (
    select distinct cluster, job_id, from keys
),

slurm_of_keys as (
    -- the record of the job's own cluster, else one of a cluster that no site of the id's
    -- jobs is named after (a fleet whose hosts have no site: the id's latest start)
    select
        key_jobs.cluster,
        key_jobs.job_id,
        arg_max(
            latest_slurm_jobs.job,
            {
                'own': latest_slurm_jobs.cluster is not distinct from key_jobs.cluster,
                'start_ts': latest_slurm_jobs.job.start_ts,
                'cluster': latest_slurm_jobs.cluster,
            }
        ) as job,
    from key_jobs
    inner join latest_slurm_jobs on latest_slurm_jobs.job_id = key_jobs.job_id
    where latest_slurm_jobs.cluster is not distinct from key_jobs.cluster
        or latest_slurm_jobs.cluster is null
        or latest_slurm_jobs.cluster not in (
            select other.cluster from key_jobs as other
            where other.job_id = key_jobs.job_id and other.cluster is not null
        )
    group by all
),

final as (
    select
        keys.job_id,
        keys.gpu_name,
        coalesce(keys.cluster, slurm_of_keys.job.cluster, allocation_sums.allocation_cluster)
            as cluster,
        coalesce(
            slurm_of_keys.job."user", allocation_sums."user", sample_people."user"
        ) as "user",
        coalesce(
            sample_people.team,
            slurm_of_keys.job.team,
            allocation_sums.team,
            reference_users.team,
            '(unmapped)'
        ) as team,
        slurm_of_keys.job.account,
        slurm_of_keys.job.partition,
        slurm_of_keys.job.state,
        case
            when slurm_of_keys.job_id is not null then slurm_of_keys.job.start_ts
            when allocation_sums.job_id is not null then allocation_sums.start_ts
            else sample_sums.first_ts
        end as start_ts,
        case
            when slurm_of_keys.job_id is not null then slurm_of_keys.job.end_ts
            when allocation_sums.job_id is not null then allocation_sums.end_ts
            else sample_sums.last_ts
        end as end_ts,
        coalesce(allocation_sums.gpus, sample_sums.gpus, slurm_of_keys.job.gpus, 0) as gpus,
        case
            when allocation_sums.job_id is not null then allocation_sums.alloc_gpu_hours
            when sample_sums.allocated_s > 0 then sample_sums.allocated_s / 3600
            -- sacct's gres/gpu count over the latest run, while open up to its last sample
            -- at the site, else to the import that last saw it running
            when slurm_of_keys.job.gpus > 0
                then slurm_of_keys.job.gpus * greatest(
                    coalesce(
                        epoch(
                            coalesce(
                                slurm_of_keys.job.end_ts,
                                job_sites.last_ts,
                                slurm_of_keys.job.seen_ts
                            )
                            - slurm_of_keys.job.start_ts
                        ),
                        0
                    ),
                    0
                ) / 3600
        end as alloc_gpu_hours,
        coalesce(sample_sums.observed_s, 0) / 3600 as gpu_hours,
        coalesce(sample_sums.busy_s, 0) / 3600 as busy_gpu_hours,
        100 * sample_sums.busy_s / nullif(sample_sums.utilization_s, 0) as avg_util_pct,
        coalesce(sample_sums.idle_s, 0) / 3600 as idle_gpu_hours,
        coalesce(waste_sums.waste_s, 0) / 3600 as waste_gpu_hours,
        coalesce(waste_sums.waste_usd, 0.0) as waste_usd,
        sample_sums.max_mem_used_bytes,
        sample_sums.mem_total_bytes,
        sample_sums.energy_j / 3.6e6 as energy_kwh,
        coalesce(sample_sums.activity_s, 0) / 3600 as activity_gpu_hours,
        coalesce(sample_sums.sm_active_s, 0) / 3600 as sm_active_gpu_hours,
        100 * sample_sums.sm_active_s / nullif(sample_sums.activity_s, 0) as avg_sm_active_pct,
        100 * sample_sums.tensor_active_s / nullif(sample_sums.activity_s, 0)
            as avg_tensor_active_pct,
        100 * sample_sums.dram_active_s / nullif(sample_sums.activity_s, 0)
            as avg_dram_active_pct,
    from keys
    left join sample_sums
        on sample_sums.cluster is not distinct from keys.cluster
        and sample_sums.job_id = keys.job_id
        and sample_sums.gpu_name is not distinct from keys.gpu_name
    left join sample_people
        on sample_people.cluster is not distinct from keys.cluster
        and sample_people.job_id = keys.job_id
        and sample_people.gpu_name is not distinct from keys.gpu_name
    left join waste_sums
        on waste_sums.cluster is not distinct from keys.cluster
        and waste_sums.job_id = keys.job_id
        and waste_sums.gpu_name is not distinct from keys.gpu_name
    left join allocation_sums
        on allocation_sums.cluster is not distinct from keys.cluster
        and allocation_sums.job_id = keys.job_id
    left join slurm_of_keys
        on slurm_of_keys.cluster is not distinct from keys.cluster
        and slurm_of_keys.job_id = keys.job_id
    left join job_sites
        on job_sites.cluster is not distinct from keys.cluster
        and job_sites.job_id = keys.job_id
    left join reference_users
        on reference_users."user"
        = coalesce(slurm_of_keys.job."user", allocation_sums."user")
)

select * from final
