-- The price of every GPU model seen in the samples at every site (and at none: cluster
-- null), per period of local days [valid_from, valid_to) (null: unbounded; one all-time
-- row when no dated prices.csv row matches the name): the price the rules in force then
-- give (dated_glob_values, sql/_macros.sql; docs/reference.md#valid-from); no match (or no
-- name) costs 0. A row that names a site (cluster) prices that site's GPUs only, and comes
-- before every row without one (the more specific wins): its glob is ranked ahead of the
-- file's others. Readers join on the name, the site and the day's period.
with series_ids as (
    select * from int_series_ids
),

hosts as (
    select * from int_hosts
),

price_rules as (
    select * from stg_prices
),

sites as (
    select distinct cluster, from hosts
    union
    select null::varchar as cluster
),

gpu_names as (
    select distinct {'gpu_name': series_ids.gpu_name, 'cluster': sites.cluster} as key,
    from series_ids
    cross join sites
),

name_matches as (
    select
        gpu_names.key,
        -- a site's rows are globs of their own, ahead of every row of all sites
        case
            when price_rules.cluster is null then price_rules.gpu_glob
            else json_array(price_rules.cluster, price_rules.gpu_glob)::varchar
        end as rule_glob,
        price_rules.rule_order - case when price_rules.cluster is null then 0 else 1000000000 end
            as rule_order,
        price_rules.usd_per_gpu_hour as value,
        price_rules.valid_from,
    from gpu_names
    inner join price_rules
        on gpu_names.key.gpu_name like price_rules.gpu_like escape '\'
        and (price_rules.cluster is null or price_rules.cluster = gpu_names.key.cluster)
),

prices as (
    select * from dated_glob_values(gpu_names, name_matches)
),

final as (
    select
        key.gpu_name,
        key.cluster,
        valid_from,
        valid_to,
        coalesce(value, 0.0) as usd_per_gpu_hour,
    from prices
)

select * from final
