"""Whether a Prefect server records the runs of the commands (`gpufleet ingest`, `build`,
`report`), and the one line that says a configured one did not answer."""

from __future__ import annotations

import contextlib
import os
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    import httpx

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


@contextlib.contextmanager
def configured_server_answers(otherwise: str) -> Iterator[None]:
    """Turn the configured Prefect server not answering (refused, timed out, cut off) into
    one GpufleetError line that names its URL and says to start it, or else to unset
    PREFECT_API_URL and `otherwise`. Caught where it surfaces, so that a server that
    answers costs no extra request; an error from any other address passes unchanged."""
    try:
        yield
    except Exception as exc:
        url = _unanswered_api_url(exc)
        if url is None:
            raise
        raise GpufleetError(
            f"the Prefect server at {_without_password(url)} did not answer: start it "
            "(`prefect server start`), "
            f"or unset PREFECT_API_URL {otherwise}"
        ) from exc


def _unanswered_api_url(exc: BaseException) -> str | None:
    """The configured API URL when `exc` or an error it came from is a request to it that
    got no answer (Prefect raises httpx's error, or a RuntimeError from it); else None."""
    import httpx
    from prefect.settings import get_current_settings

    url = str(get_current_settings().api.url or "").rstrip("/")
    unanswered = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
    seen: set[int] = set()
    error: BaseException | None = exc
    while url and error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, unanswered) and _request_url(error).startswith(url):
            return url
        error = error.__cause__ or error.__context__
    return None


def _without_password(url: str) -> str:
    """`url` with the password of its user part, if any, shown as `***`: the line may go
    to a log."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + parts.netloc.rsplit("@", 1)[1]))


def _request_url(error: httpx.RequestError) -> str:
    """The URL of the request an httpx error was raised for ("" when it names none)."""
    try:
        return str(error.request.url)
    except RuntimeError:  # httpx's way of saying the error carries no request
        return ""
