-- Every team a sample can be attributed to, with a small integer id: the series window
-- and samples_attributed_rows carry the id instead of the name (kept across builds in
-- build_state.teams). Teams come from the reference tables
-- and allocations only, never from the samples, so this table is tiny.
with users as (
    select * from stg_users
),

host_rules as (
    select * from stg_hosts
),

allocations as (
    select * from stg_allocations
),

teams as (
    select team from users
    union
    select team from host_rules
    union
    select team from allocations where team is not null
    union
    select '(unmapped)' as team
    union
    select '(unallocated)' as team
),

known as (
    select * from build_state.teams
),

numbered as (
    select
        teams.team,
        known.team_id as known_id,
        row_number() over (partition by known.team_id is null order by teams.team) as n,
    from teams
    left join known on known.team = teams.team
),

final as (
    select
        stable_id(known_id, (select max(team_id) from known), n)::integer as team_id,
        team,
    from numbered
)

select * from final
