-- Every host seen in the samples: a small integer id (the series window carries it instead
-- of the name) and the owning team by hosts.csv, the first glob that matches in file order
-- (CONTRACT 6, rule 3); null when none matches.
with samples as (
    select * from stg_samples
),

host_rules as (
    select * from stg_hosts
),

teams as (
    select * from int_teams
),

hosts as (
    select distinct host,
    from samples
),

matches as (
    select
        hosts.host,
        arg_min(host_rules.team, host_rules.rule_order) as team,
    from hosts
    inner join host_rules on hosts.host like host_rules.host_like escape '\'
    group by hosts.host
),

final as (
    select
        (row_number() over (order by hosts.host))::integer as host_id,
        hosts.host,
        matches.team,
        teams.team_id,
    from hosts
    left join matches on matches.host = hosts.host
    left join teams on teams.team = matches.team
)

select * from final
