-- Every sample status (`ok`, `lost`, `no_permission`, or what a newer collector writes) with
-- a small integer id that samples_attributed_rows stores instead of the string (kept across
-- builds in build_state.statuses).
with samples as (
    select * from stg_samples
),

known as (
    select * from build_state.statuses
),

statuses as (
    select distinct status,
    from samples
),

numbered as (
    select
        statuses.status,
        known.status_id as known_id,
        row_number() over (partition by known.status_id is null order by statuses.status) as n,
    from statuses
    left join known on known.status = statuses.status
),

final as (
    select
        stable_id(known_id, (select max(status_id) from known), n)::integer as status_id,
        status,
    from numbered
)

select * from final
