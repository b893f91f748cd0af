-- samples_attributed as stored: the GPU series, host, team and attribution as integers
-- (gpufleet/warehouse/build/ids.py), in series and time order. The samples_attributed view names them;
-- run_pieces and gpu_hourly read this table and name only their (much fewer) rows.
with samples_sequenced as (
    select * from int_samples_sequenced
),

final as (
    select * from samples_sequenced
)

select * from final
