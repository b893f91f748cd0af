-- Every user a sample can be attributed to (an allocation's user or a process owner), with a
-- small integer id that samples_attributed_rows stores instead of the name (kept across
-- builds in build_state.users), and the team of a process owner by users.csv (null when it
-- has none).
with allocations as (
    select * from stg_allocations
),

process_owners as (
    select * from int_process_owners
),

reference_users as (
    select * from stg_users
),

teams as (
    select * from int_teams
),

known as (
    select * from build_state.users
),

users as (
    select "user" from allocations where "user" is not null
    union
    select "user" from process_owners where "user" is not null
),

numbered as (
    select
        users."user",
        known.user_id as known_id,
        row_number() over (partition by known.user_id is null order by users."user") as n,
    from users
    left join known on known."user" = users."user"
),

final as (
    select
        stable_id(numbered.known_id, (select max(user_id) from known), numbered.n)::integer
            as user_id,
        numbered."user",
        teams.team_id,
    from numbered
    left join reference_users on reference_users."user" = numbered."user"
    left join teams on teams.team = reference_users.team
)

select * from final
