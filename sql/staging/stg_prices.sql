-- materialized: temp_view
-- prices.csv rules with the glob (`*`, `?`)
-- translated to a LIKE pattern escaped with '\' (glob_to_like in sql/_macros.sql), and the
-- local day each applies from (valid_from; null: all time), and the site it prices (cluster;
-- null: every site). rule_order counts every row of the file, dated or not.
with undated as (
    select rule_order, gpu_glob, usd_per_gpu_hour, null::date as valid_from, cluster,
    from ref_prices
),

dated as (
    select rule_order, gpu_glob, usd_per_gpu_hour, valid_from, cluster, from ref_prices_dated
),

source as (
    select * from undated
    union all
    select * from dated
),

final as (
    select
        rule_order,
        gpu_glob,
        glob_to_like(gpu_glob) as gpu_like,
        usd_per_gpu_hour,
        valid_from,
        cluster,
    from source
)

select * from final
