-- Every user a sample can be attributed to (an allocation's user, the user of the job
-- holding the GPU by the scheduler's record in a sample, or a process owner), with a small
-- integer id that samples_attributed_rows stores instead of the name (kept across builds
-- in build_state.users), and the user's team by users.csv's undated row (null when it has
-- none; a user with dated rows has its teams per period in int_user_teams).
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
    select "user" as name, user_id as id, from build_state.users
),

users as (
    select "user" as name from allocations where "user" is not null
    union
    select "user" as name from process_owners where "user" is not null
),

numbered as (
    select * from stable_ids(users, known)
),

final as (
    select
        numbered.id::integer as user_id,
        numbered.name as "user",
        teams.team_id,
    from numbered
    left join reference_users
        on reference_users."user" = numbered.name
        and reference_users.valid_from is null
    left join teams on teams.team = reference_users.team
)

select * from final
