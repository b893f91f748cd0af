-- The idle and thermal samples summed per piece of a run (int_run_pieces): kept, so that an
-- incremental build replaces a GPU's pieces from the local hour of its first new sample on,
-- and re-adds only the runs those pieces belong to; job_efficiency counts a job's waste
-- from them.
with pieces as (
    select * from int_run_pieces
),

final as (
    select * from pieces
)

select * from final
