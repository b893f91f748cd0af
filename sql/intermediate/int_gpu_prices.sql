-- The price of every GPU model seen in the samples, per period of local days
-- [valid_from, valid_to) (null: unbounded; one all-time row when no dated prices.csv row
-- matches the name): the price the rules in force then give (dated_glob_values,
-- sql/_macros.sql; docs/reference.md#valid-from); no match (or no name) costs 0. Readers
-- join on the name and the day's period.
with series_ids as (
    select * from int_series_ids
),

price_rules as (
    select * from stg_prices
),

gpu_names as (
    select distinct gpu_name as key,
    from series_ids
),

name_matches as (
    select
        gpu_names.key,
        price_rules.gpu_glob as rule_glob,
        price_rules.rule_order,
        price_rules.usd_per_gpu_hour as value,
        price_rules.valid_from,
    from gpu_names
    inner join price_rules on gpu_names.key like price_rules.gpu_like escape '\'
),

prices as (
    select * from dated_glob_values(gpu_names, name_matches)
),

final as (
    select
        key as gpu_name,
        valid_from,
        valid_to,
        coalesce(value, 0.0) as usd_per_gpu_hour,
    from prices
)

select * from final
