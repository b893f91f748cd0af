-- The owning team of every host seen in the samples: the first hosts.csv glob that matches,
-- in file order (CONTRACT 6, rule 3). Hosts without a match are left out.
with samples as (
    select * from stg_samples
),

host_rules as (
    select * from stg_hosts
),

hosts as (
    select distinct host,
    from samples
),

matches as (
    select
        hosts.host,
        host_rules.rule_order,
        host_rules.team,
    from hosts
    inner join host_rules on hosts.host like host_rules.host_like escape '\'
),

final as (
    select
        host,
        arg_min(team, rule_order) as team,
    from matches
    group by host
)

select * from final
