-- DuckDB macros the models share; flows/models.py runs this file before the models.

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

-- The id a name keeps across builds (flows/ids.py): its id in the id table when it has
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
