-- Every host seen in the samples, at its site (docs/reference.md#sites): a host is its name
-- at its site, so two sites' hosts of the same name are two hosts. Its site is its samples'
-- own `cluster`, else the `cluster` of the first hosts.csv row in file order (whatever its
-- valid_from) whose glob matches it and that names one (`rule_cluster`; a sample without a
-- cluster finds its host by it), else null. Each host has a small integer id (the series
-- window and samples_attributed_rows carry it instead of the name; kept across builds in
-- build_state.hosts by host_key) and the owning team by hosts.csv: the first glob that
-- matches in file order (docs/reference.md#attribution, rule 3) of the rows without
-- valid_from that name no site or the host's; null when none matches. A host that a dated
-- row's glob matches has its teams per period in int_host_teams. `timezone` is its site's
-- (site_timezone, sql/_macros.sql), `timezone_id` a small number for it (int_local_days).
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
    select host_key as name, host_id as id, from build_state.hosts
),

seen as (
    select distinct host, cluster as own_cluster,
    from samples
),

site_rules as (
    select
        seen.host,
        arg_min(host_rules.cluster, host_rules.rule_order) as rule_cluster,
    from (select distinct host, from seen) as seen
    inner join host_rules on seen.host like host_rules.host_like escape '\'
    where host_rules.cluster is not null
    group by seen.host
),

sited as (
    select distinct
        seen.host,
        coalesce(seen.own_cluster, site_rules.rule_cluster) as cluster,
        site_rules.rule_cluster,
    from seen
    left join site_rules on site_rules.host = seen.host
),

host_names as (
    select json_array(cluster, host)::varchar as name, host, cluster, rule_cluster,
    from sited
),

matches as (
    select
        host_names.name,
        arg_min(host_rules.team, host_rules.rule_order) as team,
    from host_names
    inner join host_rules
        on host_names.host like host_rules.host_like escape '\'
        and (host_rules.cluster is null or host_rules.cluster = host_names.cluster)
    where host_rules.valid_from is null
    group by host_names.name
),

numbered as (
    select * from stable_ids(host_names, known)
),

final as (
    select
        numbered.id::integer as host_id,
        numbered.name as host_key,
        numbered.host,
        numbered.cluster,
        numbered.rule_cluster,
        matches.team,
        teams.team_id,
        site_timezone(numbered.cluster) as timezone,
        dense_rank() over (order by site_timezone(numbered.cluster))::utinyint as timezone_id,
    from numbered
    left join matches on matches.name = numbered.name
    left join teams on teams.team = matches.team
)

select * from final
