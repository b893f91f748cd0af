"""Reading and checking the configuration of the sources other than the collector
(docs/reference.md#configuration): Prometheus and Kubernetes (`import prometheus`, with
the `[prometheus.series]` overrides), Slurm (`import slurm`), the S3 store (`raw_location`,
`collect --upload`), the `[clusters.<site>]` tables and how long data is kept
(`[retention]`). Their values are `gpufleet.config.model`'s dataclasses; `load.py` reads
them and `checks.py` runs the checks when it loads a file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from math import inf
from pathlib import Path
from typing import Any

from gpufleet.config.model import DEFAULT_PROMETHEUS_SERIES, Config, GridConfig
from gpufleet.config.toml import where_in
from gpufleet.errors import GpufleetError
from gpufleet.site_names import check_cluster
from gpufleet.storage.s3 import S3Location

# An s3://bucket/prefix URL (its bucket a valid S3 bucket name).
S3_URL = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/|$)")
LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MAX_POINTS_PER_QUERY = 11000  # Prometheus refuses a query_range with more points per series


def check_retention(config: Config, fail: Callable[[str | None, str, str], Exception]) -> None:
    """`[retention]`, as `check_s3`."""
    for key in ("samples_days", "reports_weeks"):
        if getattr(config.retention, key) < 0:
            raise fail("retention", key, f"'retention.{key}' must be >= 0 (0 keeps everything)")


def check_s3(config: Config, fail: Callable[[str | None, str, str], Exception]) -> None:
    """`raw_location` and `[s3]` (`fail(section, key, problem)` makes the error to raise)."""
    location = config.raw_location
    if location and not S3_URL.match(location):
        raise fail(
            None,
            "raw_location",
            f"'raw_location' must be an s3://bucket/prefix URL, got {location!r} (a local "
            "raw folder is always <data_dir>/raw: mount a shared filesystem there)",
        )
    if location and (problem := s3_url_problem(location)):
        raise fail(
            None, "raw_location", f"'raw_location' must be an s3://bucket/prefix URL: {problem}"
        )
    url = config.s3.endpoint_url
    if url and not re.match(r"^https?://[^/\s]+/?$", url):
        raise fail("s3", "endpoint_url", f"'s3.endpoint_url' is not an http(s) URL: {url!r}")
    named = [("raw_location", location)] if location else []
    named += [(f"clusters.{site}.raw_location", url) for site, url in config.site_locations]
    for n, (key, url) in enumerate(named):
        for other, other_url in named[:n]:
            if _overlap(url, other_url) or _overlap(other_url, url):
                raise fail(
                    key.rpartition(".")[0] or None,
                    "raw_location",
                    f"'{key}' ({url}) and '{other}' ({other_url}) overlap: each file would be "
                    "copied twice; give each its own bucket or prefix",
                )


def s3_url_problem(url: str) -> str:
    """What makes `url` no `s3://bucket/prefix` (a '..' in the prefix...); "" when it is one."""
    try:
        S3Location.parse(url)
    except ValueError as exc:
        return str(exc)
    return ""


def _overlap(url: str, outer: str) -> bool:
    """Whether the objects a mirror copies of `url` are (some of) those of `outer`'s: the
    same location, or one inside its samples/, allocations/ or jobs/."""
    return url == outer or any(
        f"{url}/".startswith(f"{outer}/{folder}/") for folder in ("samples", "allocations", "jobs")
    )


# a [clusters.<site>] table's keys
SITE_KEYS = ("timezone", "raw_location", "slurm_cluster", "grid_gco2_per_kwh")


def read_sites(tables: object, where: Callable[[str, str], str]) -> tuple[tuple[str, str], ...]:
    """`[clusters.<name>]` tables: each site's own `timezone`, as (name, zone) pairs in name
    order (a site with a `raw_location` alone has none: the top-level zone's days); ValueError,
    with `where(section, key)` in front, on anything else."""
    import zoneinfo

    if tables is None:
        return ()
    if not isinstance(tables, dict):
        raise ValueError(f"{where('', 'clusters')}: [clusters] must hold [clusters.<site>] tables")
    sites = []
    for name, table in sorted(tables.items()):
        section = f"clusters.{name}"
        if not isinstance(table, dict):
            raise ValueError(f"{where('clusters', name)}: '{section}' must be a table")
        try:
            check_cluster(name)
        except ValueError as exc:
            raise ValueError(f"{where('', section)}: [{section}]: {exc}") from None
        for key in table:
            if key not in SITE_KEYS:
                raise ValueError(f"{where(section, key)}: unknown key '{section}.{key}'")
        if "timezone" not in table and any(key in table for key in SITE_KEYS[1:]):
            continue
        zone = table.get("timezone")
        if (
            not isinstance(zone, str)
            or zone == "localtime"
            or (zone != "UTC" and zone not in zoneinfo.available_timezones())
        ):
            raise ValueError(
                f"{where(section, 'timezone')}: '{section}.timezone' must be an IANA time "
                f"zone name, got {zone!r}"
            )
        sites.append((name, zone))
    return tuple(sites)


def read_site_locations(
    tables: object, where: Callable[[str, str], str]
) -> tuple[tuple[str, str], ...]:
    """`[clusters.<site>] raw_location`: (site, s3://bucket/prefix) pairs in site order, the
    store every file of which is that site's (docs/sites.md); ValueError as `read_sites`
    (which checks the rest of the tables first)."""
    if not isinstance(tables, dict):
        return ()
    locations = []
    for name, table in sorted(tables.items()):
        key = f"clusters.{name}.raw_location"
        if not isinstance(table, dict) or "raw_location" not in table:
            continue
        url = table["raw_location"]
        if not isinstance(url, str) or not S3_URL.match(url):
            raise ValueError(
                f"{where(f'clusters.{name}', 'raw_location')}: '{key}' must be an "
                f"s3://bucket/prefix URL, got {url!r}"
            )
        if problem := s3_url_problem(url):
            where_key = where(f"clusters.{name}", "raw_location")
            raise ValueError(f"{where_key}: '{key}' must be an s3://bucket/prefix URL: {problem}")
        locations.append((name, url.rstrip("/")))
    return tuple(locations)


def read_slurm_clusters(
    tables: object, where: Callable[[str, str], str]
) -> tuple[tuple[str, str], ...]:
    """`[clusters.<site>] slurm_cluster`: (site, Slurm ClusterName) pairs in site order, the
    Slurm cluster whose jobs `import slurm` records as the site's (docs/sites.md); ValueError
    as `read_sites` (which checks the rest of the tables first)."""
    if not isinstance(tables, dict):
        return ()
    pairs: list[tuple[str, str]] = []
    for name, table in sorted(tables.items()):
        if not isinstance(table, dict) or "slurm_cluster" not in table:
            continue
        key, value = f"clusters.{name}.slurm_cluster", table["slurm_cluster"]
        if not isinstance(value, str) or not value.strip() or value != value.strip():
            raise ValueError(
                f"{where(f'clusters.{name}', 'slurm_cluster')}: '{key}' must be a Slurm "
                f"ClusterName (slurm.conf), got {value!r}"
            )
        taken = [site for site, cluster in pairs if cluster == value]
        if taken:
            raise ValueError(
                f"{where(f'clusters.{name}', 'slurm_cluster')}: '{key}' is {value!r}, which "
                f"is already clusters.{taken[0]}'s: a Slurm cluster is one site"
            )
        pairs.append((name, value))
    return tuple(pairs)


def read_grid_config(raw: dict[str, object], where: Callable[[str, str], str]) -> GridConfig:
    """The top-level `grid_gco2_per_kwh` and each `[clusters.<site>] grid_gco2_per_kwh` (a
    number >= 0); GpufleetError, with `where(section, key)` in front, on anything else."""
    tables = raw.get("clusters")
    named = [("", raw["grid_gco2_per_kwh"])] if "grid_gco2_per_kwh" in raw else []
    named += [
        (site, table["grid_gco2_per_kwh"])
        for site, table in sorted(tables.items() if isinstance(tables, dict) else ())
        if isinstance(table, dict) and "grid_gco2_per_kwh" in table
    ]
    grams: dict[str, float] = {}
    for site, value in named:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < inf:
            section = f"clusters.{site}" if site else ""
            dotted = f"{section}.grid_gco2_per_kwh" if site else "grid_gco2_per_kwh"
            raise GpufleetError(
                f"{where(section, 'grid_gco2_per_kwh')}: '{dotted}' must be a number of grams "
                f"of CO2 per kWh >= 0, got {value!r}"
            )
        grams[site] = float(value)
    return GridConfig(
        gco2_per_kwh=grams.pop("", None), sites=tuple((site, g) for site, g in grams.items())
    )


def check_clusters(config: Config, fail: Callable[[str | None, str, str], Exception]) -> None:
    """`cluster` and `[prometheus] cluster`: site names (they name folders), as `check_s3`."""
    for section, name in ((None, config.cluster), ("prometheus", config.prometheus.cluster)):
        try:
            if name:
                check_cluster(name)
        except ValueError:
            key = f"{section}.cluster" if section else "cluster"
            raise fail(
                section,
                "cluster",
                f"'{key}' must be 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                f"letter or digit, got {name!r}",
            ) from None


def check_prometheus(config: Config, fail: Callable[[str | None, str, str], Exception]) -> None:
    """`[prometheus]` and `[kubernetes]`, as `check_s3`."""
    prometheus, kubernetes = config.prometheus, config.kubernetes
    url = prometheus.url
    if url and not re.match(r"^https?://[^/\s]+", url):
        raise fail("prometheus", "url", f"'prometheus.url' is not an http(s) URL: {url!r}")
    if prometheus.step_seconds < 1:
        raise fail("prometheus", "step_seconds", "'prometheus.step_seconds' must be >= 1")
    window_s = prometheus.window_minutes * 60
    if prometheus.window_minutes < 1 or window_s % prometheus.step_seconds:
        raise fail(
            "prometheus",
            "window_minutes",
            "'prometheus.window_minutes' must be >= 1 and a whole number of steps "
            f"({prometheus.step_seconds} s)",
        )
    if window_s // prometheus.step_seconds > _MAX_POINTS_PER_QUERY:
        raise fail(
            "prometheus",
            "window_minutes",
            f"'prometheus.window_minutes' holds more than {_MAX_POINTS_PER_QUERY} steps, "
            "more than Prometheus answers in one query",
        )
    if prometheus.delay_seconds < 0:
        raise fail("prometheus", "delay_seconds", "'prometheus.delay_seconds' must be >= 0")
    if not 0 < prometheus.timeout_seconds < float("inf"):
        raise fail("prometheus", "timeout_seconds", "'prometheus.timeout_seconds' must be > 0")
    labels = [
        ("prometheus", key, getattr(prometheus, key))
        for key in (
            "host_label",
            "uuid_label",
            "gpu_label",
            "model_label",
            "mig_instance_label",
            "mig_profile_label",
        )
    ] + [
        ("kubernetes", key, getattr(kubernetes, key))
        for key in ("team_from", "namespace_label", "pod_label", "user_label")
    ]
    for section, key, value in labels:
        if (value or key != "user_label") and not LABEL_NAME.match(value):
            raise fail(section, key, f"'{section}.{key}' is not a label name: {value!r}")


def series_overrides(
    path: Path, text: str, table: dict[str, Any]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`[prometheus.series]` over the defaults: each key a known column, each value a series
    name or a list of them (first found wins)."""
    defaults = dict(DEFAULT_PROMETHEUS_SERIES)
    for key, value in table.items():
        where = where_in(path, text, "prometheus.series", key)
        if key not in defaults:
            raise GpufleetError(
                f"{where}: unknown key 'prometheus.series.{key}' (known: {', '.join(defaults)})"
            )
        names = [value] if isinstance(value, str) else value
        if (
            not isinstance(names, list)
            or not names
            or not all(isinstance(n, str) and LABEL_NAME.match(n) for n in names)
        ):
            raise GpufleetError(
                f"{where}: 'prometheus.series.{key}' must be a series name or a list of them, "
                f"got {value!r}"
            )
        defaults[key] = tuple(names)
    return tuple(defaults.items())
