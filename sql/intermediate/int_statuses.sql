-- Every sample status (`ok`, `lost`, `no_permission`, or what a newer collector writes) with
-- a small integer id that samples_attributed_rows stores instead of the string (kept across
-- builds in build_state.statuses).
with samples as (
    select * from stg_samples
),

known as (
    select status as name, status_id as id, from build_state.statuses
),

statuses as (
    select distinct status as name,
    from samples
),

numbered as (
    select * from stable_ids(statuses, known)
),

final as (
    select
        id::integer as status_id,
        name as status,
    from numbered
)

select * from final
