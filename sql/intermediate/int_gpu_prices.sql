-- The price of every GPU model seen in the samples, per period of local days
-- [valid_from, valid_to) (null: unbounded; one all-time row when no dated prices.csv row
-- matches the name). In a period each glob has the row that applies then (the latest
-- valid_from on or before the period's start, the first in the file among equals; else the
-- glob's first undated row), and the first glob in file order (its first row's place) that
-- matches `gpu_name` gives the price; no match (or no name) costs 0
-- (docs/reference.md#valid-from). Readers join on the name and the day's period.
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

glob_order as (
    select gpu_glob, min(rule_order) as glob_order,
    from price_rules
    group by gpu_glob
),

name_matches as (
    select
        gpu_names.gpu_name,
        price_rules.gpu_glob,
        price_rules.rule_order,
        price_rules.usd_per_gpu_hour,
        price_rules.valid_from,
    from gpu_names
    inner join price_rules on gpu_names.gpu_name like price_rules.gpu_like escape '\'
),

boundaries as (
    select gpu_name, null::date as valid_from, from gpu_names
    union
    select gpu_name, valid_from, from name_matches where valid_from is not null
),

periods as (
    select
        gpu_name,
        valid_from,
        lead(valid_from) over (partition by gpu_name order by valid_from nulls first)
            as valid_to,
    from boundaries
),

applicable as (
    select
        periods.gpu_name,
        periods.valid_from,
        name_matches.gpu_glob,
        arg_max(
            name_matches.usd_per_gpu_hour,
            {
                'dated': name_matches.valid_from is not null,
                'valid_from': coalesce(name_matches.valid_from, date '0001-01-01'),
                'file_order': -name_matches.rule_order,
            }
        ) as usd_per_gpu_hour,
    from periods
    inner join name_matches
        on name_matches.gpu_name = periods.gpu_name
        and (name_matches.valid_from is null or name_matches.valid_from <= periods.valid_from)
    group by all
),

matches as (
    select
        applicable.gpu_name,
        applicable.valid_from,
        arg_min(applicable.usd_per_gpu_hour, glob_order.glob_order) as usd_per_gpu_hour,
    from applicable
    inner join glob_order on glob_order.gpu_glob = applicable.gpu_glob
    group by all
),

final as (
    select
        periods.gpu_name,
        periods.valid_from,
        periods.valid_to,
        coalesce(matches.usd_per_gpu_hour, 0.0) as usd_per_gpu_hour,
    from periods
    left join matches
        on matches.gpu_name is not distinct from periods.gpu_name
        and matches.valid_from is not distinct from periods.valid_from
)

select * from final
