-- Every host seen in the samples: a small integer id (the series window and
-- samples_attributed_rows carry it instead of the name; kept across builds in
-- build_state.hosts) and the owning team by hosts.csv, the first glob that matches in
-- file order (docs/reference.md#attribution, rule 3), of the rows without valid_from;
-- null when none matches. A host that a dated row's glob matches has its teams per period
-- in int_host_teams.
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
    select host as name, host_id as id, from build_state.hosts
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
    where host_rules.valid_from is null
    group by hosts.host
),

host_names as (
    select host as name,
    from hosts
),

numbered as (
    select * from stable_ids(host_names, known)
),

final as (
    select
        numbered.id::integer as host_id,
        numbered.name as host,
        matches.team,
        teams.team_id,
    from numbered
    left join matches on matches.host = numbered.name
    left join teams on teams.team = matches.team
)

select * from final
