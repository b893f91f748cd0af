-- materialized: temp_view
-- users.csv: one team per user and valid_from (the local day the row applies from; null:
-- all time). Ingest rejects a user listed twice with the same valid_from but another team;
-- min() keeps it defined.
with undated as (
    select "user", team, null::date as valid_from, from ref_users
),

dated as (
    select "user", team, valid_from, from ref_users_dated
),

source as (
    select * from undated
    union all
    select * from dated
),

final as (
    select
        "user",
        valid_from,
        min(team) as team,
    from source
    group by "user", valid_from
)

select * from final
