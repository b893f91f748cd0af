-- DuckDB macros the models share; gpufleet/warehouse/models.py runs this file before the models.

-- A hosts.csv / prices.csv glob, where only `*` and `?` are wildcards, as a LIKE pattern
-- escaped with '\' (so `%`, `_` and `\` in the glob match themselves).
create or replace temp macro glob_to_like(pattern) as
    replace(
        replace(
            replace(replace(replace(pattern, '\', '\\'), '%', '\%'), '_', '\_'),
            '*',
            '%'
        ),
        '?',
        '_'
    );

-- The id a name keeps across builds (gpufleet/warehouse/ids.py): its id in the id table when it has
-- one, else the next free id (`known_max` + its number `n` among the new names).
create or replace temp macro stable_id(known_id, known_max, n) as
    coalesce(known_id, coalesce(known_max, 0) + n);

-- samples_attributed_rows.attribution_code as samples_attributed.attributed_by (the view
-- spells this out: a view in the warehouse cannot use the build's temp macros)
create or replace temp macro attribution_name(code) as
    case code
        when 1 then 'allocation'
        when 2 then 'process'
        when 3 then 'host'
        when 4 then 'none'
    end;

-- The ISO week (`YYYY-Www`) of a local day, and the Monday it starts on (CONTRACT 1).
create or replace temp macro iso_week(day) as strftime(day, '%G-W%V');

create or replace temp macro week_start(day) as day - (isodow(day) - 1)::integer;

-- samples_attributed_rows keeps a sample's yes/no facts as bits of one `flags` byte: the
-- build's write costs about the same per column whatever its type (measured: five boolean
-- columns cost as much as the per-sample floats), and these are read together.
-- Bits: 1 idle, 2 has a process, 4 contiguous, 8 starts an idle episode, 16 starts a
-- thermal event. (Thermal is not stored: it is `thermal_slowdown(clock_event_mask)`.)
create or replace temp macro sample_flags(
    is_idle, has_process, is_contiguous, starts_idle_episode, starts_thermal_event
) as (
    coalesce(is_idle, false)::integer
    + 2 * has_process::integer
    + 4 * is_contiguous::integer
    + 8 * starts_idle_episode::integer
    + 16 * starts_thermal_event::integer
)::utinyint;

create or replace temp macro sample_flag(flags, name) as
    flags & case name
        when 'is_idle' then 1
        when 'has_process' then 2
        when 'is_contiguous' then 4
        when 'starts_idle_episode' then 8
        when 'starts_thermal_event' then 16
    end != 0;

-- A thermal slowdown bit (0x20 software, 0x40 hardware) in NVML's clocks-event mask
-- (CONTRACT 6); false when the mask is unknown.
create or replace temp macro thermal_slowdown(clock_event_mask) as
    coalesce(clock_event_mask & 96 != 0, false);
