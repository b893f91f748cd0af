-- Every sample with its attribution, energy, local day and week, and whether it starts an
-- idle episode or a thermal event.
with samples_sequenced as (
    select * from int_samples_sequenced
),

final as (
    select * from samples_sequenced
)

select * from final
