-- users.csv with the team's id (int_teams): the team of a process owner or of an
-- allocation's user without a team.
with users as (
    select * from stg_users
),

teams as (
    select * from int_teams
),

final as (
    select
        users."user",
        teams.team_id,
    from users
    inner join teams on teams.team = users.team
)

select * from final
