-- DuckDB macros the models share; gpufleet/warehouse/build/models.py runs this file before the models.

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

-- The ids names keep across builds (gpufleet/warehouse/build/ids.py), for the int_* id models.
-- `names` holds each name once, in a `name` column, beside any other columns; `known` is the
-- id table as (name, id). A name keeps its id in `known`; the new names take the next free
-- ids in name order. The rows: `id` (a bigint), then the columns of `names`.
create or replace temp macro stable_ids(names, known) as table
    with numbered as (
        select
            names.*,
            known.id as known_id,
            row_number() over (partition by known.id is null order by names.name) as n,
        from query_table(names) as names
        left join query_table(known) as known on known.name = names.name
    ),

    final as (
        select
            coalesce(known_id, coalesce((select max(id) from query_table(known)), 0) + n) as id,
            * exclude (known_id, n),
        from numbered
    )

    select * from final;

-- The names of the build's integer ids (gpufleet/warehouse/build/ids.py) beside the other
-- columns of `rows`, which has series_id, host_id, team_id, user_id and job_key: the GPU's
-- gpu_uuid and gpu_name, the host and its cluster, the team, the user and the job_id (null
-- where the id is). The id tables are the small side of the joins, on the right as written
-- (models.BUILD_SETTINGS). The samples_attributed view spells the joins out: a view
-- outlives the build's macros.
create or replace temp macro id_names(rows) as table
    select
        series.gpu_uuid,
        series.gpu_name,
        hosts.host,
        hosts.cluster,
        teams.team,
        users."user",
        jobs.job_id,
        rows.* exclude (series_id, host_id, team_id, user_id, job_key),
    from query_table(rows) as rows
    inner join build_state.series as series on series.series_id = rows.series_id
    inner join build_state.hosts as hosts on hosts.host_id = rows.host_id
    left join build_state.teams as teams on teams.team_id = rows.team_id
    left join build_state.users as users on users.user_id = rows.user_id
    left join build_state.jobs as jobs on jobs.job_key = rows.job_key;

-- team_daily's and team_weekly's measures (the sums of gpu_team_daily's rows) per period,
-- site and team: `gpu_team_rows` is gpu_team_daily with the period's columns only (`day`,
-- or `iso_week` and `week_start`), and those with `cluster` and `team` are the keys of the
-- rows (a team at two sites has a row at each); `alloc_only_rows` is alloc_only_daily with
-- the same period's columns (a team with allocated-only hours alone has a row of zeros
-- measured).
create or replace temp macro team_measures(gpu_team_rows, alloc_only_rows) as table
    with measured_and_allocated as (
        select * from query_table(gpu_team_rows)
        union all by name
        select
            columns(lambda c: c in ('day', 'iso_week', 'week_start', 'cluster', 'team')),
            alloc_gpu_hours * 3600 as alloc_only_s,
        from query_table(alloc_only_rows)
    ),

    team_sums as (
        select
            columns(lambda c: c in ('day', 'iso_week', 'week_start', 'cluster', 'team')),
            sum(observed_s) as observed_s,
            sum(utilization_s) as utilization_s,
            sum(busy_s) as busy_s,
            sum(idle_s) as idle_s,
            sum(waste_s) as waste_s,
            sum(waste_usd) as waste_usd,
            sum(energy_j) as energy_j,
            count(distinct gpu_uuid) as gpus,
            sum(cost_usd) as cost_usd,
            coalesce(sum(allocated_s), 0) as allocated_s,
            coalesce(sum(alloc_only_s), 0) as alloc_only_s,
            coalesce(sum(activity_s), 0) as activity_s,
            coalesce(sum(sm_active_s), 0) as sm_active_s,
        from measured_and_allocated
        group by all
    ),

    final as (
        select
            columns(lambda c: c in ('day', 'iso_week', 'week_start', 'cluster', 'team')),
            coalesce(observed_s, 0) / 3600 as gpu_hours,
            coalesce(busy_s, 0) / 3600 as busy_gpu_hours,
            100 * busy_s / nullif(utilization_s, 0) as avg_util_pct,
            coalesce(idle_s, 0) / 3600 as idle_gpu_hours,
            coalesce(waste_s, 0) / 3600 as waste_gpu_hours,
            coalesce(waste_usd, 0) as waste_usd,
            energy_j / 3.6e6 as energy_kwh,
            gpus,
            coalesce(utilization_s, 0) / 3600 as measured_gpu_hours,
            coalesce(cost_usd, 0) as cost_usd,
            (allocated_s + alloc_only_s) / 3600 as alloc_gpu_hours,
            alloc_only_s / 3600 as alloc_only_gpu_hours,
            activity_s / 3600 as activity_gpu_hours,
            sm_active_s / 3600 as sm_active_gpu_hours,
        from team_sums
    )

    select * from final;

-- samples_attributed_rows.attribution_code as samples_attributed.attributed_by (the view
-- spells this out: a view in the warehouse cannot use the build's temp macros)
create or replace temp macro attribution_name(code) as
    case code
        when 1 then 'allocation'
        when 2 then 'process'
        when 3 then 'host'
        when 4 then 'none'
    end;

-- The ISO week (`YYYY-Www`) of a local day, and the Monday it starts on
-- (docs/reference.md#day-and-week).
create or replace temp macro iso_week(day) as strftime(day, '%G-W%V');

create or replace temp macro week_start(day) as day - (isodow(day) - 1)::integer;

-- samples_attributed_rows keeps a sample's yes/no facts as bits of one `flags` byte: the
-- build's write costs about the same per column whatever its type (a boolean column as
-- much as a float), and these are read together.
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

-- How much a cumulative counter (ECC errors, PCIe replays since the driver was loaded) grew
-- from the sample before to this one (docs/reference.md#drain): the difference, or the
-- whole count after a reset (lower than before: the driver was reloaded); 0 for the first
-- known value, null when unknown.
create or replace temp macro counter_growth(value, previous) as
    case
        when value is null then null
        when previous is null then 0
        when value >= previous then value - previous
        else value
    end;

-- A sample's health flags as bits of one byte, as samples_attributed_rows keeps them
-- (`flags`' reasons): 1 remapped_rows_pending, 2 remapped_rows_failure, 4
-- retired_pages_pending; an unknown flag is not set.
create or replace temp macro health_flags(
    remapped_rows_pending, remapped_rows_failure, retired_pages_pending
) as (
    coalesce(remapped_rows_pending, false)::integer
    + 2 * coalesce(remapped_rows_failure, false)::integer
    + 4 * coalesce(retired_pages_pending, false)::integer
)::utinyint;

-- A thermal slowdown bit (0x20 software, 0x40 hardware) in NVML's clocks-event mask
-- (docs/reference.md#thermal-event); false when the mask is unknown.
create or replace temp macro thermal_slowdown(clock_event_mask) as
    coalesce(clock_event_mask & 96 != 0, false);

-- The time zone of a site's local days (docs/sites.md): its [clusters.<site>] timezone
-- (getvariable('site_timezones'), a JSON object of site -> zone), else the configured
-- timezone (a null site too).
create or replace temp macro site_timezone(cluster) as
    coalesce(
        json_transform(getvariable('site_timezones'), '"MAP(VARCHAR, VARCHAR)"')[cluster],
        getvariable('timezone')
    );

-- The local midnight in time zone `zone` (a site's, int_hosts.timezone) that starts `day`,
-- as epoch microseconds; null for a null day. A reference row's valid_from applies from
-- this instant on at the sites of that zone (docs/sites.md).
create or replace temp macro local_midnight_us(day, zone) as
    epoch_us(timezone(zone, day::timestamp));

-- The value of glob rules in force per key and period of local days (hosts.csv's teams by
-- host, prices.csv's prices by GPU model; docs/reference.md#valid-from). `keys` has a `key`
-- column; `matches` one row per rule that matches a key: key, rule_glob, rule_order (its
-- place in the file), value, valid_from (null: undated). The periods start at null (the
-- start of time) and at each valid_from among a key's matches, and end at the next start
-- (`valid_to`, null: unbounded). In a period each glob has the row that applies then (the
-- latest valid_from on or before the period's start, the first in the file among equals;
-- else the glob's first undated row), and the first glob in file order (its first row's
-- place) gives the value; a key no rule matches has one all-time row with a null value.
create or replace temp macro dated_glob_values(keys, matches) as table
    with rules as (
        select * from query_table(matches)
    ),

    glob_order as (
        select rule_glob, min(rule_order) as glob_order,
        from rules
        group by rule_glob
    ),

    boundaries as (
        select key, null::date as valid_from, from query_table(keys)
        union
        select key, valid_from, from rules where valid_from is not null
    ),

    periods as (
        select
            key,
            valid_from,
            lead(valid_from) over (partition by key order by valid_from nulls first) as valid_to,
        from boundaries
    ),

    applicable as (
        select
            periods.key,
            periods.valid_from,
            rules.rule_glob,
            arg_max(
                rules.value,
                {
                    'dated': rules.valid_from is not null,
                    'valid_from': coalesce(rules.valid_from, date '0001-01-01'),
                    'file_order': -rules.rule_order,
                }
            ) as value,
        from periods
        inner join rules
            on rules.key = periods.key
            and (rules.valid_from is null or rules.valid_from <= periods.valid_from)
        group by all
    ),

    resolved as (
        select
            applicable.key,
            applicable.valid_from,
            arg_min(applicable.value, glob_order.glob_order) as value,
        from applicable
        inner join glob_order on glob_order.rule_glob = applicable.rule_glob
        group by all
    )

    select
        periods.key,
        periods.valid_from,
        periods.valid_to,
        resolved.value,
    from periods
    left join resolved
        on resolved.key is not distinct from periods.key
        and resolved.valid_from is not distinct from periods.valid_from;
