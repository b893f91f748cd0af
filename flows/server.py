"""Whether a Prefect server records the runs of the commands (`gpufleet ingest`, `build`,
`report`)."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

# Besides PREFECT_API_URL in the environment, where Prefect 3 reads its settings
# (prefect.settings.sources): these variables choose a profile or the profiles file, and
# these files (in the working directory, and the profiles file in PREFECT_HOME) may set
# the URL.
_PROFILE_VARIABLES = ("PREFECT_PROFILE", "PREFECT_PROFILES_PATH")
_WORKING_DIRECTORY_FILES = (".env", "prefect.toml")


def prefect_server_configured() -> bool:
    """PREFECT_API_URL in the environment or in Prefect's settings. Without one, `ingest`,
    `build` and `report` call the engine the flows call, as the deployments' flows would,
    minus the run's record: a flow would start Prefect's temporary server, most of the
    time of a `gpufleet build` with nothing to build.

    Prefect's settings are asked only where something could set the URL: importing them
    takes as long as the rest of such a build."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    if "prefect.settings" not in sys.modules and not _settings_beyond_defaults():
        return False
    from prefect.settings import get_current_settings

    return bool(get_current_settings().api.url)


def _settings_beyond_defaults() -> bool:
    """Whether a profile, a settings file or a variable that picks one exists: else
    Prefect's settings are its defaults, which name no server."""
    if any(os.environ.get(name) for name in _PROFILE_VARIABLES):
        return True
    if any(Path(name).is_file() for name in _WORKING_DIRECTORY_FILES):
        return True
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    if (home / "profiles.toml").is_file():
        return True
    try:
        pyproject = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True  # Prefect reads it (or fails on it) itself
    return "prefect" in pyproject.get("tool", {})
