-- The owning team of each host that a dated hosts.csv row's glob matches, per period: from
-- the local midnight of one valid_from among its matching rows (or the start of time) to
-- the next one's, as epoch microseconds [from_us, to_us). In a period each glob has the row
-- that applies then (the latest valid_from on or before the period's start, the first in
-- the file among equals; else the glob's first undated row; else none), and the first glob
-- in file order (its first row's place) that has one gives the team
-- (docs/reference.md#valid-from). Resolved on the hosts and their few dates, not per
-- sample; hosts no dated row matches are not here (their team is int_hosts'), so a
-- hosts.csv without valid_from leaves this table empty.
with hosts as (
    select * from int_hosts
),

host_rules as (
    select * from stg_hosts
),

teams as (
    select * from int_teams
),

glob_order as (
    select host_glob, min(rule_order) as glob_order,
    from host_rules
    group by host_glob
),

dated_globs as (
    select distinct host_like,
    from host_rules
    where valid_from is not null
),

dated_hosts as (
    select distinct hosts.host_id, hosts.host,
    from hosts
    inner join dated_globs on hosts.host like dated_globs.host_like escape '\'
),

host_matches as (
    select
        dated_hosts.host_id,
        host_rules.host_glob,
        host_rules.rule_order,
        host_rules.team,
        host_rules.valid_from,
    from dated_hosts
    inner join host_rules on dated_hosts.host like host_rules.host_like escape '\'
),

boundaries as (
    select host_id, null::date as valid_from, from dated_hosts
    union
    select host_id, valid_from, from host_matches where valid_from is not null
),

periods as (
    select
        host_id,
        valid_from,
        lead(valid_from) over (partition by host_id order by valid_from nulls first) as valid_to,
    from boundaries
),

applicable as (
    select
        periods.host_id,
        periods.valid_from,
        host_matches.host_glob,
        arg_max(
            host_matches.team,
            {
                'dated': host_matches.valid_from is not null,
                'valid_from': coalesce(host_matches.valid_from, date '0001-01-01'),
                'file_order': -host_matches.rule_order,
            }
        ) as team,
    from periods
    inner join host_matches
        on host_matches.host_id = periods.host_id
        and (host_matches.valid_from is null or host_matches.valid_from <= periods.valid_from)
    group by all
),

resolved as (
    select
        applicable.host_id,
        applicable.valid_from,
        arg_min(applicable.team, glob_order.glob_order) as team,
    from applicable
    inner join glob_order on glob_order.host_glob = applicable.host_glob
    group by all
),

final as (
    select
        periods.host_id,
        coalesce(local_midnight_us(periods.valid_from), -9223372036854775808) as from_us,
        coalesce(local_midnight_us(periods.valid_to), 9223372036854775807) as to_us,
        teams.team_id,
    from periods
    left join resolved
        on resolved.host_id = periods.host_id
        and resolved.valid_from is not distinct from periods.valid_from
    left join teams on teams.team = resolved.team
)

select * from final
