"""Configuration: command-line flag > environment > TOML file > default.

`load_config` resolves a `Config` (`model.py`: its values and their defaults); `load.py`
reads the file, `toml.py` parses it and finds a key's line, `sources.py` reads and checks
the sources' sections and `checks.py` every other value. The keys, their defaults and their
checks: docs/reference.md#configuration.
"""

from gpufleet.config.load import (
    CONFIG_FILE_NAME,
    ENV_CONFIG,
    ENV_DATA_DIR,
    load_config,
    with_data_dir,
)
from gpufleet.config.model import (
    DEFAULT_PROMETHEUS_SERIES,
    ENV_SMTP_PASSWORD,
    ComputeConfig,
    Config,
    GridConfig,
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

__all__ = [
    "CONFIG_FILE_NAME",
    "DEFAULT_PROMETHEUS_SERIES",
    "ENV_CONFIG",
    "ENV_DATA_DIR",
    "ENV_SMTP_PASSWORD",
    "ComputeConfig",
    "Config",
    "GridConfig",
    "IdleConfig",
    "IngestConfig",
    "KubernetesConfig",
    "NotifyConfig",
    "PrometheusConfig",
    "ReportConfig",
    "RetentionConfig",
    "S3Config",
    "SeriesConfig",
    "SlurmConfig",
    "SmtpConfig",
    "load_config",
    "with_data_dir",
]
