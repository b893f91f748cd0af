-- materialized: temp_view
-- prices.csv rules with the glob (`*`, `?`)
-- translated to a LIKE pattern escaped with '\' (glob_to_like in sql/_macros.sql).
with source as (
    select * from ref_prices
),

final as (
    select
        rule_order,
        gpu_glob,
        glob_to_like(gpu_glob) as gpu_like,
        usd_per_gpu_hour,
    from source
)

select * from final
