"""Loading the configuration: command-line flag > environment > TOML file > default.

The keys, their defaults and their checks: docs/reference.md#configuration.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpufleet.config.checks import check_values, read_day
from gpufleet.config.model import (
    ENV_SMTP_PASSWORD,
    ComputeConfig,
    Config,
    IdleConfig,
    IngestConfig,
    KubernetesConfig,
    NotifyConfig,
    PrometheusConfig,
    ReportConfig,
    RetentionConfig,
    S3Config,
    SeriesConfig,
    SlurmConfig,
    SmtpConfig,
)
from gpufleet.config.sources import (
    read_grid_config,
    read_site_locations,
    read_sites,
    read_slurm_clusters,
    series_overrides,
)
from gpufleet.config.toml import read_toml, where_in
from gpufleet.errors import GpufleetError

ENV_DATA_DIR = "GPUFLEET_DATA_DIR"
ENV_CONFIG = "GPUFLEET_CONFIG"
CONFIG_FILE_NAME = "gpufleet.toml"


# section -> key -> (python type(s) accepted, description for messages)
_SCHEMA: dict[str | None, dict[str, tuple[tuple[type, ...], str]]] = {
    None: {
        "data_dir": ((str,), "a path"),
        "timezone": ((str,), "an IANA time zone name"),
        "raw_location": ((str,), "an s3://bucket/prefix URL"),
        "cluster": ((str,), "a site name"),
        "grid_gco2_per_kwh": ((int, float), "a number of grams of CO2 per kWh"),
    },
    "s3": {"endpoint_url": ((str,), "an http(s) URL"), "region": ((str,), "a region name")},
    "idle": {
        "threshold_pct": ((int, float), "a number"),
        "min_minutes": ((int, float), "a number"),
    },
    "series": {"max_gap_factor": ((int, float), "a number")},
    "report": {
        "recipients": ((list,), "a list of addresses"),
        "sender": ((str,), "a string"),
        "page_url": ((str,), "an http(s) URL"),
    },
    "notify": {
        "min_waste_gpu_hours": ((int, float), "a number"),
        "opt_out": ((list,), "a list of user names or addresses"),
    },
    "smtp": {
        "host": ((str,), "a string"),
        "port": ((int,), "an integer"),
        "starttls": ((bool,), "true or false"),
        "username": ((str,), "a string"),
    },
    "prometheus": {
        "url": ((str,), "a URL"),
        "step_seconds": ((int,), "a whole number of seconds"),
        "window_minutes": ((int,), "a whole number of minutes"),
        "delay_seconds": ((int,), "a whole number of seconds"),
        "timeout_seconds": ((int, float), "a number"),
        "host_label": ((str,), "a label name"),
        "uuid_label": ((str,), "a label name"),
        "gpu_label": ((str,), "a label name"),
        "model_label": ((str,), "a label name"),
        "mig_instance_label": ((str,), "a label name"),
        "mig_profile_label": ((str,), "a label name"),
        "cluster": ((str,), "a site name"),
        "series": ((dict,), "a table of column = series name(s)"),
    },
    "kubernetes": {
        "team_from": ((str,), '"namespace" or a label name'),
        "namespace_label": ((str,), "a label name"),
        "pod_label": ((str,), "a label name"),
        "user_label": ((str,), "a label name or an empty string"),
    },
    "slurm": {"team_from": ((str,), '"account" or "user"'), "enabled": ((bool,), "true or false")},
    "ingest": {
        "stale_after_minutes": ((int,), "a whole number of minutes"),
        "earliest": ((dt.date, str), "a date such as 2015-01-01"),
        "max_clock_skew_minutes": ((int,), "a whole number of minutes"),
    },
    "retention": {k: ((int,), "a whole number") for k in ("samples_days", "reports_weeks")},
    "compute": {"dask": ((str,), '"", "local:N" or "tcp://host:port"')},
}


def _check_file(path: Path, text: str, raw: dict[str, Any]) -> None:
    """Reject unknown sections, unknown keys and values of the wrong type."""
    for name, value in raw.items():
        if name == "clusters":  # [clusters.<site>]: read_sites
            continue
        if isinstance(value, dict):
            if name not in _SCHEMA:
                raise GpufleetError(f"{where_in(path, text, None, name)}: unknown section [{name}]")
            sections: list[tuple[str | None, dict[str, Any]]] = [(name, value)]
        else:
            sections = [(None, {name: value})]
        for section, table in sections:
            known = _SCHEMA[section]
            for key, item in table.items():
                dotted = f"{section}.{key}" if section else key
                if key not in known:
                    hint = (
                        f" (the password is read only from ${ENV_SMTP_PASSWORD})"
                        if dotted == "smtp.password"
                        else ""
                    )
                    raise GpufleetError(
                        f"{where_in(path, text, section, key)}: unknown key '{dotted}'{hint}"
                    )
                types, description = known[key]
                bad_bool = isinstance(item, bool) and bool not in types
                if bad_bool or not isinstance(item, types):
                    raise GpufleetError(
                        f"{where_in(path, text, section, key)}: '{dotted}' must be {description}, "
                        f"got {item!r}"
                    )
                if isinstance(item, list) and not all(isinstance(r, str) for r in item):
                    where = where_in(path, text, section, key)
                    raise GpufleetError(f"{where}: '{dotted}' must be a list of strings")


def _sites(
    path: Path | None, text: str, tables: object, read: Callable[..., tuple[tuple[str, str], ...]]
) -> tuple[tuple[str, str], ...]:
    try:
        return read(tables, lambda s, k: where_in(path, text, s or None, k) if path else "")
    except ValueError as exc:
        raise GpufleetError(str(exc)) from None


def load_config(
    *,
    config_path: str | Path | None = None,
    data_dir: str | Path | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Resolve the configuration from flags (the arguments), the environment and the file.

    The file is `config_path`, else $GPUFLEET_CONFIG, else `<data_dir>/gpufleet.toml` when
    it exists. A bad file raises `GpufleetError` naming the file, line and problem.
    """
    env = os.environ if environ is None else environ
    explicit = config_path or env.get(ENV_CONFIG) or None
    flag_or_env_dir = data_dir or env.get(ENV_DATA_DIR) or None

    path: Path | None = Path(explicit) if explicit else None
    if path is None:
        candidate = Path(flag_or_env_dir or "data") / CONFIG_FILE_NAME
        path = candidate if candidate.is_file() else None
    elif not path.is_file():
        raise GpufleetError(f"{path}: config file not found")

    raw: dict[str, Any] = {}
    text = ""
    if path is not None:
        text, raw = read_toml(path)
        _check_file(path, text, raw)

    def section(name: str) -> dict[str, Any]:
        value = raw.get(name, {})
        return dict(value) if isinstance(value, dict) else {}

    file_dir = raw.get("data_dir")
    resolved_dir = Path(flag_or_env_dir or file_dir or "data")
    report = section("report")
    if "recipients" in report:
        report["recipients"] = tuple(report["recipients"])
    notify = section("notify")
    if "opt_out" in notify:
        notify["opt_out"] = tuple(entry.strip() for entry in notify["opt_out"])
    if "min_waste_gpu_hours" in notify:
        notify["min_waste_gpu_hours"] = float(notify["min_waste_gpu_hours"])
    prometheus = section("prometheus")
    if "series" in prometheus:
        assert path is not None
        prometheus["series"] = series_overrides(path, text, prometheus["series"])
    if "timeout_seconds" in prometheus:
        prometheus["timeout_seconds"] = float(prometheus["timeout_seconds"])
    ingest = section("ingest")
    if "earliest" in ingest:
        assert path is not None
        ingest["earliest"] = read_day(path, text, "ingest", "earliest", ingest["earliest"])
    idle = {k: float(v) for k, v in section("idle").items()}
    series = {k: float(v) for k, v in section("series").items()}
    config = Config(
        data_dir=resolved_dir,
        timezone=str(raw.get("timezone", "UTC")),
        cluster=str(raw.get("cluster", "")),
        sites=_sites(path, text, raw.get("clusters"), read_sites),
        site_locations=_sites(path, text, raw.get("clusters"), read_site_locations),
        slurm_clusters=_sites(path, text, raw.get("clusters"), read_slurm_clusters),
        raw_location=str(raw.get("raw_location", "")).rstrip("/"),
        s3=S3Config(**section("s3")),
        idle=IdleConfig(**idle),
        series=SeriesConfig(**series),
        report=ReportConfig(**report),
        notify=NotifyConfig(**notify),
        smtp=SmtpConfig(**section("smtp")),
        prometheus=PrometheusConfig(**prometheus),
        kubernetes=KubernetesConfig(**section("kubernetes")),
        slurm=SlurmConfig(**section("slurm")),
        ingest=IngestConfig(**ingest),
        retention=RetentionConfig(**section("retention")),
        compute=ComputeConfig(**section("compute")),
        grid=read_grid_config(
            raw, lambda s, k: where_in(path, text, s or None, k) if path else "configuration"
        ),
        source=path,
    )
    check_values(config, path, text)
    return config


def with_data_dir(config: Config, data_dir: Path) -> Config:
    """A copy of `config` that points at another data directory."""
    return replace(config, data_dir=data_dir)
