-- The team of each user that users.csv gives dated rows (valid_from), per period and time
-- zone of a site (int_hosts.timezone_id): from the local midnight in that zone of one
-- valid_from (or the start of time: the undated row, else no team) to the next one's, as
-- epoch microseconds [from_us, to_us). A row applies from its date on, local to the site
-- of the sample, and wins over the undated one (docs/reference.md#valid-from). Resolved on
-- the users, their few dates and the few zones, not per sample: int_samples_attributed
-- finds a sample's period with an equi-join on the user and zone and a range check. Users without dated rows are not here (their
-- team is int_users'), so a users.csv without valid_from leaves this table empty.
with reference_users as (
    select * from stg_users
),

users as (
    select * from int_users
),

teams as (
    select * from int_teams
),

hosts as (
    select * from int_hosts
),

zones as (
    select distinct timezone_id, timezone, from hosts
),

dated_users as (
    select distinct "user",
    from reference_users
    where valid_from is not null
),

user_rows as (
    -- from the start of time: the undated row, or none
    select
        dated_users."user",
        null::date as valid_from,
        undated.team,
    from dated_users
    left join reference_users as undated
        on undated."user" = dated_users."user"
        and undated.valid_from is null
    union all
    select
        "user",
        valid_from,
        team,
    from reference_users
    where valid_from is not null
),

periods as (
    select
        "user",
        valid_from,
        lead(valid_from) over (partition by "user" order by valid_from nulls first) as valid_to,
        team,
    from user_rows
),

final as (
    select
        users.user_id,
        zones.timezone_id,
        coalesce(
            local_midnight_us(periods.valid_from, zones.timezone), -9223372036854775808
        ) as from_us,
        coalesce(
            local_midnight_us(periods.valid_to, zones.timezone), 9223372036854775807
        ) as to_us,
        teams.team_id,
    from periods
    inner join users on users."user" = periods."user"
    cross join zones
    left join teams on teams.team = periods.team
)

select * from final
