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
