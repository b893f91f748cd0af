-- materialized: temp_view
-- users.csv: one team per user (ingest rejects a user listed twice; min() keeps it defined).
with source as (
    select * from ref_users
),

final as (
    select
        "user",
        min(team) as team,
    from source
    group by "user"
)

select * from final
