-- materialized: temp_view
-- hosts.csv rules with the glob (`*`, `?`)
-- translated to a LIKE pattern escaped with '\' (glob_to_like in sql/_macros.sql).
with source as (
    select * from ref_hosts
),

final as (
    select
        rule_order,
        host_glob,
        glob_to_like(host_glob) as host_like,
        team,
    from source
)

select * from final
