-- The price of every GPU model seen in the samples: the first prices.csv glob that matches
-- `gpu_name`, in file order; no match (or no name) costs 0.
with series_ids as (
    select * from int_series_ids
),

price_rules as (
    select * from stg_prices
),

gpu_names as (
    select distinct gpu_name,
    from series_ids
),

matches as (
    select
        gpu_names.gpu_name,
        arg_min(price_rules.usd_per_gpu_hour, price_rules.rule_order) as usd_per_gpu_hour,
    from gpu_names
    inner join price_rules on gpu_names.gpu_name like price_rules.gpu_like escape '\'
    group by gpu_names.gpu_name
),

final as (
    select
        gpu_names.gpu_name,
        coalesce(matches.usd_per_gpu_hour, 0.0) as usd_per_gpu_hour,
    from gpu_names
    left join matches on matches.gpu_name is not distinct from gpu_names.gpu_name
)

select * from final
