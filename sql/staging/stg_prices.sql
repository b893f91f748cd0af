-- materialized: temp_view
-- prices.csv rules with the glob (`*`, `?`) translated to a LIKE pattern escaped with '\'.
with source as (
    select * from ref_prices
),

final as (
    select
        rule_order,
        gpu_glob,
        replace(
            replace(
                replace(replace(replace(gpu_glob, '\', '\\'), '%', '\%'), '_', '\_'),
                '*',
                '%'
            ),
            '?',
            '_'
        ) as gpu_like,
        usd_per_gpu_hour,
    from source
)

select * from final
