-- Allocations cut into disjoint segments (start_ts, end_ts] per host at its site
-- (int_hosts' host_id) and GPU: its index, or for a row that names its MIG device or GPU by
-- UUID that UUID (gpu_index null), each holding the allocation that wins there: among
-- those covering it, the latest start_ts (ties: the later end, then the larger job_id). An
-- open allocation runs to infinity. A row with a cluster covers the host of its name at
-- that site (or at no site: a fleet without sites whose scheduler names its cluster), one
-- without the host of its name at every site; so two sites' rows never share a segment.
-- Each segment is listed once per UTC hour it overlaps that has samples, so samples find
-- their allocation with an equi-join on (host_id, gpu_index or gpu_uuid, hour) and a range
-- check (docs/reference.md#attribution, rule 1): no sort of the samples, unlike an ASOF join. The job and user are their integer ids (int_jobs, int_users), as
-- samples_attributed_rows stores them.
with allocations as (
    select * from stg_allocations
),

local_days as (
    select * from int_local_days
),

hosts as (
    select * from int_hosts
),

teams as (
    select * from int_teams
),

users as (
    select * from stg_users
),

user_ids as (
    select * from int_users
),

job_keys as (
    select * from int_jobs
),

allocations_with_team as (
    select
        allocations.job_id,
        allocations."user",
        coalesce(allocations.team, users.team, '(unmapped)') as team,
        -- no team of its own: users.csv's, which int_samples_attributed takes per sample
        -- for a user with dated rows (int_user_teams)
        allocations.team is null as team_from_users,
        -- allocations on hosts without samples have nothing to attribute
        hosts.host_id,
        -- a row that names its device by UUID holds that device, whatever its index says
        case when allocations.gpu_uuid is null then allocations.gpu_index end as gpu_index,
        allocations.gpu_uuid,
        allocations.start_ts,
        allocations.end_ts,
    from allocations
    inner join hosts
        on hosts.host = allocations.host
        and (
            allocations.cluster is null
            or hosts.cluster is null
            or hosts.cluster = allocations.cluster
        )
    left join users on users."user" = allocations."user" and users.valid_from is null
    where allocations.end_ts is null or allocations.end_ts > allocations.start_ts
),

boundaries as (
    select host_id, gpu_index, gpu_uuid, start_ts as boundary_ts, from allocations_with_team
    union
    select host_id, gpu_index, gpu_uuid, end_ts as boundary_ts, from allocations_with_team
    where end_ts is not null
),

segments as (
    select
        host_id,
        gpu_index,
        gpu_uuid,
        boundary_ts as start_ts,
        lead(boundary_ts) over (
            partition by host_id, gpu_index, gpu_uuid order by boundary_ts
        ) as end_ts,
    from boundaries
),

covering as (
    select
        segments.host_id,
        segments.gpu_index,
        segments.gpu_uuid,
        segments.start_ts,
        segments.end_ts,
        arg_max(
            {
                'job_id': allocations_with_team.job_id,
                'user': allocations_with_team."user",
                'team': allocations_with_team.team,
                'team_from_users': allocations_with_team.team_from_users,
            },
            {
                'start_ts': allocations_with_team.start_ts,
                'end_ts': coalesce(allocations_with_team.end_ts, 'infinity'::timestamptz),
                'job_id': allocations_with_team.job_id,
            }
        ) as winner,
    from segments
    inner join allocations_with_team
        on allocations_with_team.host_id = segments.host_id
        and allocations_with_team.gpu_index is not distinct from segments.gpu_index
        and allocations_with_team.gpu_uuid is not distinct from segments.gpu_uuid
        and allocations_with_team.start_ts <= segments.start_ts
        and (
            allocations_with_team.end_ts is null
            or allocations_with_team.end_ts >= segments.end_ts
        )
    group by all
),

sample_hours as (
    select distinct bucket // 4 as hour,
    from local_days
),

segments_in_us as (
    select
        covering.*,
        epoch_us(covering.start_ts) as start_us,
        epoch_us(covering.end_ts) as end_us,
        epoch_us(covering.start_ts) // 3600000000 as first_hour,
        coalesce(epoch_us(covering.end_ts) // 3600000000, 9223372036854775807) as last_hour,
    from covering
),

segment_hours as (
    select
        segments_in_us.*,
        sample_hours.hour,
    from segments_in_us
    inner join sample_hours
        on sample_hours.hour >= segments_in_us.first_hour
        and sample_hours.hour <= segments_in_us.last_hour
),

final as (
    select
        segment_hours.host_id,
        segment_hours.gpu_index,
        segment_hours.gpu_uuid,
        segment_hours.hour,
        segment_hours.start_us,
        segment_hours.end_us,
        segment_hours.start_ts,
        segment_hours.end_ts,
        job_keys.job_key,
        user_ids.user_id,
        teams.team_id,
        segment_hours.winner.team_from_users,
    from segment_hours
    inner join teams on teams.team = segment_hours.winner.team
    left join job_keys on job_keys.job_id = segment_hours.winner.job_id
    left join user_ids on user_ids."user" = segment_hours.winner."user"
)

select * from final
