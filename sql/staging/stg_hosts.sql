-- materialized: temp_view
-- hosts.csv rules with the glob (`*`, `?`) translated to a LIKE pattern escaped with '\'.
with source as (
    select * from ref_hosts
),

final as (
    select
        rule_order,
        host_glob,
        replace(
            replace(
                replace(replace(replace(host_glob, '\', '\\'), '%', '\%'), '_', '\_'),
                '*',
                '%'
            ),
            '?',
            '_'
        ) as host_like,
        team,
    from source
)

select * from final
