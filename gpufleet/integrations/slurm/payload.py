"""The JSON that `sacct --json` and `squeue --json` print, across Slurm releases.

Slurm 22.05 prints the `openapi/dbv0.0.38` (sacct) and `openapi/v0.0.38` (squeue) schemas:
times and counts are plain integers (0: not set), a state is a string. From 23.02 on, the
output comes from a `data_parser` plugin (`meta.plugin.data_parser`, v0.0.39 in 23.02 up to
v0.0.44 in 25.11) and many numbers become objects `{"set": true, "infinite": false,
"number": N}`, states become lists (`["RUNNING"]`, from v0.0.40), and a job's nodes move in
`job_resources` (v0.0.41). Every reader here accepts both shapes of a field; a schema this
module does not know, or a field of a shape no release prints, is one `GpufleetError` line
naming the source and the field.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from gpufleet.errors import GpufleetError

# The schemas read: 38 is Slurm 22.05's openapi plugins, 39 and later data_parser versions.
FIRST_VERSION = 38
LAST_VERSION = 45
SCHEMAS_READ = (
    f"openapi/dbv0.0.{FIRST_VERSION} (Slurm 22.05) and data_parser "
    f"v0.0.39 to v0.0.{LAST_VERSION} (Slurm 23.02 and later)"
)

_DATA_PARSER = re.compile(r"^(?:data_parser/)?v0\.0\.(\d+)(?:\+.*)?$")  # "+flags" may follow
_OPENAPI = re.compile(r"^openapi/(?:db)?v0\.0\.(\d+)$")


class Payload(NamedTuple):
    """One command's parsed output: its schema version and its jobs."""

    source: str  # "sacct --json" or the file it was read from, for messages
    version: int  # 38 for Slurm 22.05, else the data_parser version (39, 40, ...)
    jobs: list[Any]


class Job:
    """One job object of a payload, read field by field; a field of an unexpected shape
    raises a GpufleetError naming `<source>: jobs[i].<path>`."""

    def __init__(self, payload: Payload, index: int) -> None:
        self.source = payload.source
        self.version = payload.version
        self.where = f"jobs[{index}]"
        self.data = payload.jobs[index]
        if not isinstance(self.data, Mapping):
            raise self.error("", "expected an object")

    def error(self, path: str, problem: str) -> GpufleetError:
        field = f"{self.where}.{path}" if path else self.where
        return GpufleetError(f"{self.source}: {field}: {problem}")

    def get(self, path: str, *, required: bool = True) -> Any:
        """The value at a dotted path; a missing key is an error when `required`."""
        value: Any = self.data
        walked = []
        for key in path.split("."):
            walked.append(key)
            if not isinstance(value, Mapping):
                raise self.error(".".join(walked[:-1]), f"expected an object, got {_show(value)}")
            if key not in value:
                if required:
                    raise self.error(".".join(walked), "missing")
                return None
            value = value[key]
        return value

    def first(self, *paths: str) -> tuple[str, Any]:
        """The first of `paths` present (and its path); an error naming the first if none."""
        for path in paths:
            value = self.get(path, required=False)
            if value is not None:
                return path, value
        raise self.error(paths[0], "missing")

    def text(self, path: str) -> str | None:
        value = self.get(path, required=False)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.error(path, f"expected a string, got {_show(value)}")
        return value

    def number(self, path: str, *, required: bool = True) -> int | None:
        """An integer field: a plain number, or `{"set", "infinite", "number"}` (None when
        not set or infinite)."""
        return number(self, path, self.get(path, required=required))

    def timestamp(self, path: str) -> dt.datetime | None:
        """A UNIX time field; 0 and unset are None (not started, still running)."""
        seconds = self.number(path)
        if not seconds:
            return None
        return dt.datetime.fromtimestamp(seconds, dt.UTC)

    def states(self, path: str) -> tuple[str, ...]:
        """A job state: a string (22.05, 23.02) or a list of flags (23.11 on)."""
        value = self.get(path)
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise self.error(path, f"expected a state or a list of states, got {_show(value)}")


def number(job: Job, path: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, Mapping) and "set" in value:
        if not value.get("set") or value.get("infinite"):
            return None
        inner = value.get("number")
        if isinstance(inner, int) and not isinstance(inner, bool):
            return inner
    raise job.error(path, f'expected a number or {{"set", "number"}}, got {_show(value)}')


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_payload(text: str, *, source: str) -> Payload:
    """Parse one command's JSON output and check its schema version."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GpufleetError(f"{source}: not JSON ({exc})") from exc
    if not isinstance(data, Mapping):
        raise GpufleetError(f"{source}: expected a JSON object with 'meta' and 'jobs'")
    errors = data.get("errors") or []
    if errors:
        first = errors[0]
        message = None
        if isinstance(first, Mapping):
            message = first.get("description") or first.get("error")
        raise GpufleetError(f"{source}: Slurm reported an error: {message or _show(first)}")
    version = schema_version(data.get("meta"), source)
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise GpufleetError(f"{source}: jobs: expected a list, got {_show(jobs)}")
    return Payload(source, version, jobs)


def schema_version(meta: Any, source: str) -> int:
    """The schema version that `meta.plugin` names (`data_parser`, else `type`)."""
    plugin = meta.get("plugin") if isinstance(meta, Mapping) else None
    if not isinstance(plugin, Mapping):
        raise GpufleetError(
            f"{source}: meta.plugin: missing, so the schema is unknown (read: {SCHEMAS_READ})"
        )
    data_parser, plugin_type = plugin.get("data_parser"), plugin.get("type")
    if data_parser:
        field, name, match = "data_parser", data_parser, _DATA_PARSER.match(str(data_parser))
    else:
        field, name, match = "type", plugin_type, _OPENAPI.match(str(plugin_type or ""))
    version = int(match.group(1)) if match else None
    if version is None or not FIRST_VERSION <= version <= LAST_VERSION:
        raise GpufleetError(
            f"{source}: meta.plugin.{field}: unknown schema {name!r} (read: {SCHEMAS_READ})"
        )
    return version
