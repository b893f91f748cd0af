-- GPU-hours the scheduler allocated on hosts without a collector's samples while the job
-- ran, per local day, site (cluster), host and team (docs/reference.md#allocated-gpu-hours):
-- counted from the scheduler alone, never measured. A job's GPUs on a host are its
-- allocation rows there (squeue's indices), else its Slurm record's gres/gpu count spread
-- evenly over its nodes (sacct gives no count per node); a record without nodes is one
-- piece of host null. An open row or record counts up to the record's seen_ts (the import
-- that last saw it running), or nothing when no record says so. A piece is measured, and
-- left out here, when its host has samples (gpu_team_daily) between its start and end:
-- those hours are the samples' (team_daily's allocated hours of measured GPUs). The team:
-- the row's or record's, else users.csv's for the user on the job's first day, else
-- (unmapped). Recomputed whole by every build (a few rows per job and day); an incremental
-- build recomputes team_daily and team_weekly for the days whose rows changed.
with slurm_jobs as (
    select * from stg_slurm_jobs
),

allocation_rows as (
    select * from stg_allocations
),

gpu_days as (
    select * from gpu_team_daily
),

reference_users as (
    select * from stg_users
),

row_pieces as (
    -- one per allocation row: one GPU, up to the record's seen_ts while open
    select
        allocation_rows.cluster,
        allocation_rows.job_id,
        allocation_rows.host,
        allocation_rows.start_ts,
        coalesce(
            allocation_rows.end_ts,
            (
                select max(slurm_jobs.seen_ts) from slurm_jobs
                where slurm_jobs.job_id = allocation_rows.job_id
                    and slurm_jobs.start_ts = allocation_rows.start_ts
                    and slurm_jobs.cluster is not distinct from allocation_rows.cluster
            )
        ) as end_ts,
        1.0 as gpus,
        allocation_rows."user",
        allocation_rows.team,
    from allocation_rows
    where allocation_rows.job_id is not null
),

record_pieces as (
    -- a record without allocation rows of its start: its GPUs over its nodes
    select
        slurm_jobs.cluster,
        slurm_jobs.job_id,
        unnest(coalesce(nullif(slurm_jobs.hosts, []), [null::varchar])) as host,
        slurm_jobs.start_ts,
        coalesce(slurm_jobs.end_ts, slurm_jobs.seen_ts) as end_ts,
        slurm_jobs.gpus / greatest(len(coalesce(slurm_jobs.hosts, [])), 1) as gpus,
        slurm_jobs."user",
        slurm_jobs.team,
    from slurm_jobs
    where coalesce(slurm_jobs.gpus, 0) > 0
        and not exists (
            select 1 from allocation_rows
            where allocation_rows.job_id = slurm_jobs.job_id
                and allocation_rows.start_ts = slurm_jobs.start_ts
                and allocation_rows.cluster is not distinct from slurm_jobs.cluster
        )
),

pieces as (
    select * from row_pieces where end_ts > start_ts
    union all
    select * from record_pieces where end_ts > start_ts
),

unmeasured as (
    -- no sample of the host (at the piece's site, or any site for a piece of none, or of no
    -- site) between its start and end
    select pieces.*,
    from pieces
    where not exists (
        select 1 from gpu_days
        where gpu_days.host = pieces.host
            and (
                pieces.cluster is null
                or gpu_days.cluster is null
                or gpu_days.cluster = pieces.cluster
            )
            and gpu_days.last_ts > pieces.start_ts
            and gpu_days.first_ts <= pieces.end_ts
    )
),

teams as (
    select
        unmeasured.*,
        coalesce(
            unmeasured.team,
            (
                select arg_max(
                    reference_users.team, coalesce(reference_users.valid_from, date '0001-01-01')
                )
                from reference_users
                where reference_users."user" = unmeasured."user"
                    and (
                        reference_users.valid_from is null
                        or reference_users.valid_from
                        <= timezone(site_timezone(unmeasured.cluster), unmeasured.start_ts)::date
                    )
            ),
            '(unmapped)'
        ) as job_team,
    from unmeasured
),

days as (
    -- each local day the piece spans at its site, with the instants that bound it
    select
        teams.*,
        unnest(
            generate_series(
                timezone(site_timezone(teams.cluster), teams.start_ts)::date,
                timezone(site_timezone(teams.cluster), teams.end_ts)::date,
                interval 1 day
            )
        )::date as day,
    from teams
),

day_seconds as (
    select
        days.*,
        epoch(
            least(days.end_ts, timezone(site_timezone(days.cluster), (days.day + 1)::timestamp))
            - greatest(days.start_ts, timezone(site_timezone(days.cluster), days.day::timestamp))
        ) as seconds,
    from days
),

final as (
    select
        day,
        iso_week(day) as iso_week,
        week_start(day) as week_start,
        cluster,
        host,
        job_team as team,
        count(distinct job_id) as jobs,
        sum(gpus * seconds) / 3600 as alloc_gpu_hours,
    from day_seconds
    where seconds > 0
    group by all
)

select * from final
