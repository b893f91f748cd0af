-- Every host seen in the samples: a small integer id (the series window and
-- samples_attributed_rows carry it instead of the name; kept across builds in
-- build_state.hosts) and the owning team by hosts.csv, the first glob that matches in
-- file order (CONTRACT 6, rule 3); null when none matches.
with samples as (
    select * from stg_samples
),

host_rules as (
    select * from stg_hosts
),

teams as (
    select * from int_teams
),

known as (
    select * from build_state.hosts
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

numbered as (
    select
        hosts.host,
        known.host_id as known_id,
        row_number() over (partition by known.host_id is null order by hosts.host) as n,
    from hosts
    left join known on known.host = hosts.host
),

final as (
    select
        stable_id(numbered.known_id, (select max(host_id) from known), numbered.n)::integer
            as host_id,
        numbered.host,
        matches.team,
        teams.team_id,
    from numbered
    left join matches on matches.host = numbered.host
    left join teams on teams.team = matches.team
)

select * from final
