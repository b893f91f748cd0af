"""`gpufleet export showback`: GPU usage and cost per team, month and GPU model, for finance.

One row per team (`SubAccountName`), site (`x_cluster`, also FOCUS's `RegionName`; null
for hosts of no site) and GPU model (`x_gpu_name`) with samples in the month (local dates
in the zone of each site, docs/sites.md), summed from `gpu_team_daily`, so a team's rows
add up to its `team_daily` figures of the month. Columns are named after the FinOps FOCUS
specification where one fits; the others carry gpufleet's own names (as in `team_daily`)
behind FOCUS's `x_` prefix for custom columns:

- `ChargePeriodStart`, `ChargePeriodEnd`: the month, from its first local midnight to the
  next month's (exclusive) in the row's site's zone, in UTC as FOCUS writes date-times;
- `SubAccountName`: the team; `ChargeCategory`: `Usage`;
- `ConsumedQuantity` (and `PricingQuantity`): GPU-hours (`gpu_hours`); `ConsumedUnit` (and
  `PricingUnit`): `GPU-Hours`;
- `ListUnitPrice`: the price used, USD per GPU-hour: the first ref/prices.csv glob that
  matches the GPU model (the rows of the row's site first, then those without `cluster`),
  with the row that applies on the day (`valid_from`), as the build
  prices waste (0 without one), read from the prices loaded by the last ingest (after a
  prices.csv change, build before exporting, or `x_waste_usd` still carries the old
  price); when the price changes during the month, BilledCost / ConsumedQuantity;
- `BilledCost`: each day's GPU-hours at that day's price (ConsumedQuantity * ListUnitPrice
  when the price held all month); `BillingCurrency`: `USD`;
- custom: `x_month` (`YYYY-MM`), `x_gpu_name`, and `x_busy_gpu_hours`, `x_idle_gpu_hours`,
  `x_waste_gpu_hours`, `x_waste_usd`, `x_energy_kwh` as in `team_daily`, `x_gpus`: the
  distinct GPUs of that team and model in the month, `x_co2_kg` (`gpufleet.carbon`);
- custom: `x_idle_capacity_usd`: on the rows of `(unallocated)` (GPUs no allocation,
  process or hosts.csv row gave to a team), their `BilledCost`, else 0: the idle capacity,
  OpenCost's idle bucket, a cost of its own that is no team's waste;
- custom, the same in every row of a site: `x_coverage_start`, `x_coverage_end`: the part
  of the site's month the warehouse has samples for (the month's start, or the site's
  first sample when that is later; the month's end, or the site's last sample when that
  is earlier), and `x_is_partial_month`: that part is not the whole month (the month is not
  over, the latest samples are not ingested yet, or collection began during it). The
  export then also says so in one warning line on stderr.

The CSV is for spreadsheets: costs (`BilledCost`, `x_waste_usd`) are rounded to cents, and
a text cell that a spreadsheet would run as a formula gets a single quote in front
(`gpufleet.csv_cells`). Parquet keeps every value exact.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
import sys
import zoneinfo
from pathlib import Path

import polars as pl

from gpufleet.carbon import use_grid
from gpufleet.config import Config
from gpufleet.console import printable
from gpufleet.csv_cells import defuse_formulas
from gpufleet.errors import GpufleetError
from gpufleet.kept_showback import as_closed, as_known, closed_sites, kept_rows
from gpufleet.site_zones import fleet_zones
from gpufleet.warehouse.base.catalog import has_table
from gpufleet.warehouse.build.models import MACROS_FILE_NAME, SQL_DIR, set_variables
from gpufleet.warehouse.publish import connect_read_only

FORMATS = ("csv", "parquet")
_MONTH_RE = re.compile(r"([0-9]{4})-([0-9]{2})")  # ASCII digits only
# FOCUS's date-time format: ISO 8601 in UTC with a Z.
_FOCUS_DATETIME = "%Y-%m-%dT%H:%M:%SZ"
# Money columns, written in cents in the CSV (exact in Parquet).
CENTS_COLUMNS = ("BilledCost", "x_waste_usd", "x_idle_capacity_usd")
UNALLOCATED = "(unallocated)"  # the team of GPUs no rule attributes (docs/reference.md)

SHOWBACK_SQL = r"""
with gpu_team_days as (
    select * from gpu_team_daily
    where day >= $first_day and day < $next_first_day
),

price_rows as (
    select rule_order, gpu_glob, usd_per_gpu_hour, null::date as valid_from, cluster,
    from ref_prices
    union all
    select rule_order, gpu_glob, usd_per_gpu_hour, valid_from, cluster, from ref_prices_dated
),

price_rules as (
    -- a site's rows (cluster) price its GPUs only, ahead of the rows of every site
    select
        rule_order,
        min(rule_order) over (partition by cluster, gpu_glob)
            - case when cluster is null then 0 else 1000000000 end as glob_order,
        gpu_glob,
        glob_to_like(gpu_glob) as gpu_like,
        usd_per_gpu_hour,
        valid_from,
        cluster,
    from price_rows
),

gpu_days as (
    select distinct gpu_name, cluster, day,
    from gpu_team_days
),

applicable as (
    -- per GPU model, site, day and glob: the row that applies that day (the latest
    -- valid_from on or before it, else the undated row), as the build prices waste
    select
        gpu_days.gpu_name,
        gpu_days.cluster,
        gpu_days.day,
        price_rules.glob_order,
        arg_max(
            price_rules.usd_per_gpu_hour,
            {
                'dated': price_rules.valid_from is not null,
                'valid_from': coalesce(price_rules.valid_from, date '0001-01-01'),
                'file_order': -price_rules.rule_order,
            }
        ) as usd_per_gpu_hour,
    from gpu_days
    inner join price_rules
        on gpu_days.gpu_name like price_rules.gpu_like escape '\'
        and (price_rules.cluster is null or price_rules.cluster = gpu_days.cluster)
        and (price_rules.valid_from is null or price_rules.valid_from <= gpu_days.day)
    group by all
),

day_prices as (
    select
        gpu_days.gpu_name,
        gpu_days.cluster,
        gpu_days.day,
        coalesce(arg_min(applicable.usd_per_gpu_hour, applicable.glob_order), 0.0)
            as usd_per_gpu_hour,
    from gpu_days
    left join applicable
        on applicable.gpu_name is not distinct from gpu_days.gpu_name
        and applicable.cluster is not distinct from gpu_days.cluster
        and applicable.day = gpu_days.day
    group by all
),

day_grid as (
    -- each site's grid intensity on each day (gpufleet.carbon)
    select cluster, day, grid_gco2_per_kwh(cluster, day) as gco2_per_kwh,
    from (select distinct cluster, day, from gpu_team_days)
),

site_samples as (
    -- each site's first and last sample, of any day: how much of its month it covers
    select
        cluster,
        min(first_ts) as first_ts,
        max(last_ts) as last_ts,
    from gpu_team_daily
    group by cluster
),

site_months as (
    -- each site's month: from its first local midnight to the next month's, in its zone
    select
        cluster,
        timezone(site_timezone(cluster), $first_day::timestamp) as period_start,
        timezone(site_timezone(cluster), $next_first_day::timestamp) as period_end,
    from (select distinct cluster, from gpu_team_days)
),

coverage as (
    select
        site_months.*,
        greatest(site_samples.first_ts, period_start) as coverage_start,
        least(site_samples.last_ts, period_end) as coverage_end,
    from site_months
    inner join site_samples on site_samples.cluster is not distinct from site_months.cluster
),

team_gpu_sums as (
    select
        gpu_team_days.cluster,
        team,
        gpu_team_days.gpu_name,
        sum(observed_s) / 3600 as gpu_hours,
        sum(busy_s) / 3600 as busy_gpu_hours,
        sum(idle_s) / 3600 as idle_gpu_hours,
        sum(waste_s) / 3600 as waste_gpu_hours,
        sum(waste_usd) as waste_usd,
        sum(energy_j) / 3.6e6 as energy_kwh,
        co2_kg(energy_j, day_grid.gco2_per_kwh) as co2_kg,
        count(distinct gpu_uuid) as gpus,
        min(day_prices.usd_per_gpu_hour) as min_price,
        max(day_prices.usd_per_gpu_hour) as max_price,
        sum(observed_s / 3600 * day_prices.usd_per_gpu_hour) as billed_usd,
    from gpu_team_days
    inner join day_prices
        on day_prices.gpu_name is not distinct from gpu_team_days.gpu_name
        and day_prices.cluster is not distinct from gpu_team_days.cluster
        and day_prices.day = gpu_team_days.day
    inner join day_grid
        on day_grid.cluster is not distinct from gpu_team_days.cluster
        and day_grid.day = gpu_team_days.day
    group by gpu_team_days.cluster, team, gpu_team_days.gpu_name
),

gpu_prices as (
    -- a price that changed during the month: each day's hours at that day's price, and
    -- the mean price per GPU-hour
    select
        cluster,
        team,
        gpu_name,
        case
            when min_price = max_price then min_price
            when gpu_hours > 0 then billed_usd / gpu_hours
            else 0.0
        end as usd_per_gpu_hour,
        case
            when min_price = max_price then gpu_hours * min_price else billed_usd
        end as billed_usd,
    from team_gpu_sums
),

final as (
    select
        coverage.period_start as ChargePeriodStart,
        coverage.period_end as ChargePeriodEnd,
        team_gpu_sums.team as SubAccountName,
        'Usage' as ChargeCategory,
        team_gpu_sums.gpu_hours as ConsumedQuantity,
        'GPU-Hours' as ConsumedUnit,
        team_gpu_sums.gpu_hours as PricingQuantity,
        'GPU-Hours' as PricingUnit,
        gpu_prices.usd_per_gpu_hour as ListUnitPrice,
        gpu_prices.billed_usd as BilledCost,
        'USD' as BillingCurrency,
        $month as x_month,
        team_gpu_sums.gpu_name as x_gpu_name,
        team_gpu_sums.busy_gpu_hours as x_busy_gpu_hours,
        team_gpu_sums.idle_gpu_hours as x_idle_gpu_hours,
        team_gpu_sums.waste_gpu_hours as x_waste_gpu_hours,
        team_gpu_sums.waste_usd as x_waste_usd,
        -- the idle capacity (OpenCost's idle bucket): what the GPUs no team held cost
        case
            when team_gpu_sums.team = $unallocated then gpu_prices.billed_usd else 0.0
        end as x_idle_capacity_usd,
        team_gpu_sums.energy_kwh as x_energy_kwh,
        team_gpu_sums.co2_kg as x_co2_kg,
        team_gpu_sums.gpus as x_gpus,
        team_gpu_sums.cluster as x_cluster,
        team_gpu_sums.cluster as RegionName,
        coverage.coverage_start as x_coverage_start,
        coverage.coverage_end as x_coverage_end,
        coverage.coverage_start > coverage.period_start
            or coverage.coverage_end < coverage.period_end as x_is_partial_month,
    from team_gpu_sums
    inner join gpu_prices
        on gpu_prices.team = team_gpu_sums.team
        and gpu_prices.cluster is not distinct from team_gpu_sums.cluster
        and gpu_prices.gpu_name is not distinct from team_gpu_sums.gpu_name
    inner join coverage on coverage.cluster is not distinct from team_gpu_sums.cluster
)

select * from final
order by SubAccountName, x_cluster nulls first, x_gpu_name
"""


def month_days(month: str) -> tuple[dt.date, dt.date]:
    """The first day of a `YYYY-MM` month and of the next; ValueError if it is not one."""
    match = _MONTH_RE.fullmatch(month)
    if not match or not 1 <= int(match.group(2)) <= 12 or match.group(1) in ("0000", "9999"):
        raise ValueError(f"{month!r} is not a month like 2026-11")
    year, number = int(match.group(1)), int(match.group(2))
    first = dt.date(year, number, 1)
    return first, first + dt.timedelta(days=calendar.monthrange(year, number)[1])


def showback_params(month: str) -> dict[str, object]:
    """SHOWBACK_SQL's parameters for `month` (YYYY-MM; ValueError if it is not one): its
    local days (each site's in its zone: SHOWBACK_SQL needs the models' variables and
    macros, site_timezone)."""
    first, next_first = month_days(month)
    return {
        "first_day": first,
        "next_first_day": next_first,
        "month": month,
        "unallocated": UNALLOCATED,
    }


def showback(config: Config, month: str) -> pl.DataFrame:
    """The month's showback rows (see the module's table), by team and GPU model."""
    params = showback_params(month)
    with connect_read_only(config) as con:
        if not has_table(con, "gpu_team_daily"):
            raise GpufleetError("the warehouse has no gpu_team_daily yet; run 'gpufleet build'")
        con.execute("set timezone = 'UTC'")
        # `gpufleet close`: the rows of a closed month (or site) as they were at close
        closed = closed_sites(con, month)
        kept = kept_rows(con, month) if closed else None
        if kept is not None and None in closed:
            return as_closed(kept).sort(_ORDER, nulls_last=_NULLS_LAST)
        set_variables(con, config)  # each site's zone (site_timezone)
        con.execute((SQL_DIR / MACROS_FILE_NAME).read_text(encoding="utf-8"))  # glob_to_like
        use_grid(con, config)  # grid_gco2_per_kwh, co2_kg
        computed = con.sql(SHOWBACK_SQL, params=params).pl()
    if kept is None:
        return computed
    sites = [site for site in closed if site is not None]
    open_rows = computed.filter(~pl.col("x_cluster").is_in(sites).fill_null(False))
    # rows kept before a column was added (x_idle_capacity_usd) have it null
    rows = pl.concat([open_rows, as_known(kept)], how="diagonal_relaxed")
    return rows.sort(_ORDER, nulls_last=_NULLS_LAST)


# SHOWBACK_SQL's order: by team, site (nulls first), GPU model
_ORDER = ["SubAccountName", "x_cluster", "x_gpu_name"]
_NULLS_LAST = [True, False, True]


def output_format(fmt: str | None, output: Path | None) -> str:
    """The format to write: the flag, else the output file's suffix, else CSV."""
    if fmt is not None:
        return fmt
    if output is None:
        return "csv"
    suffix = output.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise GpufleetError(
            f"{output}: cannot tell the format from the name; add --csv or --parquet"
        )
    return suffix


def coverage_warning(frame: pl.DataFrame, month: str, config: Config) -> str | None:
    """One line when the warehouse covers only part of the month at a site (None when all
    of it everywhere): each such site's coverage, in its zone."""
    if frame.is_empty():
        return f"{month} has no samples in the warehouse: the export has no rows"
    partial = frame.filter(pl.col("x_is_partial_month")).unique(
        "x_cluster", keep="first", maintain_order=True
    )
    if partial.is_empty():
        return None
    sites = []
    for row in partial.iter_rows(named=True):
        timezone = config.site_timezone(row["x_cluster"])
        zone = zoneinfo.ZoneInfo(timezone)
        parts = [f"at site {printable(row['x_cluster'])}"] if row["x_cluster"] else []
        if row["x_coverage_start"] > row["ChargePeriodStart"]:
            parts.append(f"from {row['x_coverage_start'].astimezone(zone):%Y-%m-%d %H:%M}")
        if row["x_coverage_end"] < row["ChargePeriodEnd"]:
            parts.append(f"up to {row['x_coverage_end'].astimezone(zone):%Y-%m-%d %H:%M}")
        sites.append(f"{' '.join(parts)} ({timezone})")
    return (
        f"{month} is not complete: the warehouse has samples {', '.join(sites)} only; its "
        "rows say x_is_partial_month = true"
    )


def for_spreadsheets(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows as the CSV holds them: costs in cents, no text cell a formula."""
    money = [column for column in CENTS_COLUMNS if column in frame.columns]  # kept rows: older
    return defuse_formulas(frame.with_columns(pl.col(money).round(2)))


def write_showback(frame: pl.DataFrame, fmt: str, output: Path | None) -> None:
    """CSV (times as FOCUS writes them, `2026-11-01T00:00:00Z`; see `for_spreadsheets`) or
    Parquet (exact); CSV to stdout without `output`."""
    if fmt == "parquet" and output is None:
        raise GpufleetError("--parquet needs -o FILE")
    try:
        if fmt == "parquet" and output is not None:
            frame.write_parquet(output, compression="zstd")
        elif output is None:
            sys.stdout.write(for_spreadsheets(frame).write_csv(datetime_format=_FOCUS_DATETIME))
        else:
            for_spreadsheets(frame).write_csv(output, datetime_format=_FOCUS_DATETIME)
    except OSError as exc:
        raise GpufleetError(f"{output}: cannot write: {exc.strerror or exc}") from exc


def export_showback(
    config: Config, month: str, *, fmt: str | None = None, output: Path | None = None
) -> str:
    """The `export showback` command: write the month's rows; returns a one-line summary
    ("" when the CSV went to stdout). A month the warehouse does not cover in full is
    written all the same, with a warning line on stderr."""
    chosen = output_format(fmt, output)
    frame = showback(config, month)
    write_showback(frame, chosen, output)
    warning = coverage_warning(frame, month, config)
    if warning is not None:
        print(f"gpufleet: warning: {warning}", file=sys.stderr)
    if output is None:
        return ""
    teams = frame["SubAccountName"].n_unique()
    return (
        f"showback {month} ({', '.join(fleet_zones(config))}): {frame.height} rows, {teams} teams, "
        f"{frame['ConsumedQuantity'].sum():,.2f} GPU-hours, "
        f"${frame['BilledCost'].sum():,.2f} -> {output}"
    )
