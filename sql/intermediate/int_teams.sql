-- Every team a sample can be attributed to, with a small integer id: the series window
-- and samples_attributed_rows carry the id instead of the name (kept across builds in
-- build_state.teams). Teams come from the reference tables, allocations and Slurm jobs
-- only, never from the samples, so this table is tiny.
with users as (
    select * from stg_users
),

host_rules as (
    select * from stg_hosts
),

allocations as (
    select * from stg_allocations
),

slurm_jobs as (
    select * from stg_slurm_jobs
),

teams as (
    select team as name from users
    union
    select team as name from host_rules
    union
    select team as name from allocations where team is not null
    union
    select team as name from slurm_jobs where team is not null
    union
    select '(unmapped)' as name
    union
    select '(unallocated)' as name
),

known as (
    select team as name, team_id as id, from build_state.teams
),

numbered as (
    select * from stable_ids(teams, known)
),

final as (
    select
        id::integer as team_id,
        name as team,
    from numbered
)

select * from final
