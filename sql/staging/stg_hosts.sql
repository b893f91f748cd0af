-- materialized: temp_view
-- hosts.csv rules with the glob (`*`, `?`)
-- translated to a LIKE pattern escaped with '\' (glob_to_like in sql/_macros.sql), and the
-- local day each applies from (valid_from; null: all time), and the site whose hosts it
-- applies to (cluster; null: every site). rule_order counts every row of the file, dated or
-- not.
with undated as (
    select rule_order, host_glob, team, null::date as valid_from, cluster, from ref_hosts
),

dated as (
    select rule_order, host_glob, team, valid_from, cluster, from ref_hosts_dated
),

source as (
    select * from undated
    union all
    select * from dated
),

final as (
    select
        rule_order,
        host_glob,
        glob_to_like(host_glob) as host_like,
        team,
        valid_from,
        cluster,
    from source
)

select * from final
