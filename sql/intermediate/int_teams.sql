-- Every team a sample can be attributed to, with a small integer id: the series window
-- carries and compares the id instead of the name. Teams come from the reference tables
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

final as (
    select
        (row_number() over (order by team))::integer as team_id,
        team,
    from teams
)

select * from final
