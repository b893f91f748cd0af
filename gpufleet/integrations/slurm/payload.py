"""The JSON that `sacct --json` and `squeue --json` print, across Slurm releases.

Slurm 22.05 prints the `openapi/dbv0.0.38` (sacct) and `openapi/v0.0.38` (squeue) schemas:
times and counts are plain integers (0: not set), a state is a string. From 23.02 on, the
output comes from a `data_parser` plugin (`meta.plugin.data_parser`, v0.0.39 in 23.02 up to
v0.0.44 in 25.11) and many numbers become objects `{"set": true, "infinite": false,
"number": N}`, states become lists (`["RUNNING"]`, from v0.0.40), and a job's nodes move in
`job_resources` (v0.0.41). Every reader here accepts both shapes of a field; a schema this
module does not know, or a field of a shape no release prints, is one `GpufleetError` line
naming the source and the field. A job whose time cannot be right (before `[ingest]
earliest`, more than `[ingest] max_clock_skew_minutes` after the import's clock, as the
sample ingest bounds a sample's; an end before its start) is refused alone: one line naming
the job and the field (`Refused`), and the rest of the payload is read.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from gpufleet.config import IngestConfig
from gpufleet.errors import GpufleetError

# The schemas read: 38 is Slurm 22.05's openapi plugins, 39 and later data_parser versions.
FIRST_VERSION = 38
LAST_VERSION = 45
SCHEMAS_READ = (
    f"openapi/dbv0.0.{FIRST_VERSION} (Slurm 22.05) and data_parser "
    f"v0.0.39 to v0.0.{LAST_VERSION} (Slurm 23.02 and later)"
)

_YEAR_10000 = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp() + 1

_DATA_PARSER = re.compile(r"^(?:data_parser/)?v0\.0\.(\d+)(?:\+.*)?$")  # "+flags" may follow
_OPENAPI = re.compile(r"^openapi/(?:db)?v0\.0\.(\d+)$")


class TimeLimits(NamedTuple):
    """The times a job may carry, as `time_limits` sets them from `[ingest]`: none before
    `earliest`, none after `latest` (None: no bound but year 9999)."""

    earliest: dt.datetime  # midnight (UTC) of [ingest] earliest
    latest: dt.datetime | None  # the import's clock plus [ingest] max_clock_skew_minutes
    skew_minutes: int

    def problem(self, seconds: float) -> str | None:
        """Why a UNIX time is no job's (None: it may be one)."""
        if isinstance(seconds, float) and math.isnan(seconds):
            return "is not a time"
        if seconds < self.earliest.timestamp():
            return f"is before {self.earliest:%Y-%m-%d}, [ingest] earliest"
        if self.latest is not None and seconds > self.latest.timestamp():
            return (
                f"is more than {self.skew_minutes} minutes after now (after "
                f"{self.latest:%Y-%m-%dT%H:%M:%SZ}, [ingest] max_clock_skew_minutes)"
            )
        if seconds >= _YEAR_10000:
            return "is past year 9999"
        return None


def time_limits(ingest: IngestConfig | None = None, now: dt.datetime | None = None) -> TimeLimits:
    """The times a job may carry under `[ingest] earliest` and `max_clock_skew_minutes`
    (None: their defaults), the bounds of a sample's time in `gpufleet ingest`, at `now`
    (aware; None: no bound ahead but year 9999). Clocks that disagree by less than the skew
    are forgiven."""
    ingest = ingest or IngestConfig()
    skew = ingest.max_clock_skew_minutes
    return TimeLimits(
        earliest=dt.datetime.combine(ingest.earliest, dt.time(), dt.UTC),
        latest=None if now is None else now.astimezone(dt.UTC) + dt.timedelta(minutes=skew),
        skew_minutes=skew,
    )


class Payload(NamedTuple):
    """One command's parsed output: its schema version and its jobs."""

    source: str  # "sacct --json" or the file it was read from, for messages
    version: int  # 38 for Slurm 22.05, else the data_parser version (39, 40, ...)
    jobs: Iterable[Any]  # a list, or the jobs of a stream as they are read (`stream.py`)


class Refused(NamedTuple):
    """A job left out of the import: a record that cannot be right (a time out of range,
    an end before its start)."""

    job_id: str
    line: str  # "<source>: jobs[i].<field>: <problem>: job <id> not imported"


class RefusedTime(Exception):
    """A job's time out of range; the parser turns it into a `Refused` naming the job."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class Job:
    """One job object of a payload, read field by field; a field of an unexpected shape
    raises a GpufleetError naming `<source>: jobs[i].<path>`, a time out of `limits` a
    `RefusedTime`."""

    def __init__(self, payload: Payload, index: int, data: Any, *, limits: TimeLimits) -> None:
        self.source = payload.source
        self.version = payload.version
        self.where = f"jobs[{index}]"
        self.data = data
        self.limits = limits
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
        """A UNIX time field; 0 and unset are None (not started, still running). A time
        out of the job's `limits` raises RefusedTime (a number no release prints as a time,
        such as 1e30, too)."""
        value = self.get(path)
        is_set = isinstance(value, Mapping) and value.get("set") and not value.get("infinite")
        inner = value.get("number") if is_set else value
        seconds: float | None = inner if isinstance(inner, float) else self.number(path)
        if not seconds:
            return None
        problem = self.limits.problem(seconds)
        if problem:
            raise RefusedTime(path, f"{_show_time(seconds)} {problem}")
        return dt.datetime.fromtimestamp(int(seconds), dt.UTC)

    def refuse(
        self,
        job_id: str,
        refusal: RefusedTime,
        refused: list[Refused] | None,
        *,
        left_out: str = "not imported",
    ) -> None:
        """Add the line naming the refused job, its field and the problem to `refused`
        (None: raise it as a GpufleetError)."""
        field = f"{self.where}.{refusal.path}"
        line = f"{self.source}: {field}: {refusal.problem}: job {job_id} {left_out}"
        if refused is None:
            raise GpufleetError(line) from refusal
        refused.append(Refused(job_id, line))

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


def _show_time(seconds: float) -> str:
    """A UNIX time as printed, and as a UTC time where it is one (`-5 (1969-12-31T23:59:55Z)`)."""
    shown = f"{seconds:g}" if isinstance(seconds, float) else str(seconds)
    if isinstance(seconds, float) and not math.isfinite(seconds):
        return shown
    try:
        return f"{shown} ({dt.datetime.fromtimestamp(int(seconds), dt.UTC):%Y-%m-%dT%H:%M:%SZ})"
    except (OverflowError, ValueError, OSError):
        return f"{shown} ({'past year 9999' if seconds > 0 else 'before year 1'})"


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
    check_errors(data.get("errors"), source)
    version = schema_version(data.get("meta"), source)
    return Payload(source, version, checked_jobs(data.get("jobs"), source))


def check_errors(errors: Any, source: str) -> None:
    """Fail with the first error Slurm reported in the payload's `errors`, if any."""
    if errors:
        first = errors[0] if isinstance(errors, list) else errors  # a list in every release
        message = None
        if isinstance(first, Mapping):
            message = first.get("description") or first.get("error")
        raise GpufleetError(f"{source}: Slurm reported an error: {message or _show(first)}")


def checked_jobs(jobs: Any, source: str) -> list[Any]:
    """The payload's `jobs`, which must be a list."""
    if not isinstance(jobs, list):
        raise GpufleetError(f"{source}: jobs: expected a list, got {_show(jobs)}")
    return jobs


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
