-- The owning team of each host that a dated hosts.csv row's glob matches, per period: from
-- the local midnight (in the zone of the host's site, int_hosts.timezone) of one valid_from
-- among its matching rows (or the start of time) to the next one's, as epoch microseconds
-- [from_us, to_us), with the team the rules in force
-- then give (dated_glob_values, sql/_macros.sql; docs/reference.md#valid-from). Resolved on
-- the hosts and their few dates, not per sample; hosts no dated row matches are not here
-- (their team is int_hosts'), so a hosts.csv without valid_from leaves this table empty.
-- A row that names a site (cluster) applies to that site's hosts only.
with hosts as (
    select * from int_hosts
),

host_rules as (
    select * from stg_hosts
),

teams as (
    select * from int_teams
),

dated_globs as (
    select distinct host_like, cluster,
    from host_rules
    where valid_from is not null
),

dated_hosts as (
    select distinct hosts.host_id as key, hosts.host, hosts.cluster,
    from hosts
    inner join dated_globs
        on hosts.host like dated_globs.host_like escape '\'
        and (dated_globs.cluster is null or dated_globs.cluster = hosts.cluster)
),

host_matches as (
    select
        dated_hosts.key,
        host_rules.host_glob as rule_glob,
        host_rules.rule_order,
        host_rules.team as value,
        host_rules.valid_from,
    from dated_hosts
    inner join host_rules
        on dated_hosts.host like host_rules.host_like escape '\'
        and (host_rules.cluster is null or host_rules.cluster = dated_hosts.cluster)
),

host_teams as (
    select * from dated_glob_values(dated_hosts, host_matches)
),

final as (
    select
        host_teams.key as host_id,
        coalesce(
            local_midnight_us(host_teams.valid_from, hosts.timezone), -9223372036854775808
        ) as from_us,
        coalesce(
            local_midnight_us(host_teams.valid_to, hosts.timezone), 9223372036854775807
        ) as to_us,
        teams.team_id,
    from host_teams
    inner join hosts on hosts.host_id = host_teams.key
    left join teams on teams.team = host_teams.value
)

select * from final
