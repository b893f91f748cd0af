"""A Prefect task that says how a `local:N` worker process started (tests/test_dask.py).

`worker_start_task(probe)` returns the CPU its worker process had spent before the task's
body ran (its start, its imports, Prefect's task run), the Prefect server it reports to, and
the value of the environment variable the probe names.
"""

from __future__ import annotations

import os
import resource
from typing import NamedTuple

from prefect import task
from prefect.cache_policies import NO_CACHE


class Probe(NamedTuple):
    label: str
    variable: str  # an environment variable to read in the worker


class WorkerStart(NamedTuple):
    cpu_s: float  # user + system of the worker process, up to the task's body
    api_url: str | None  # the Prefect server the worker's settings name
    value: str | None  # the probe's variable in the worker's environment


@task(name="worker-start", cache_policy=NO_CACHE)
def worker_start_task(probe: Probe) -> WorkerStart:
    from prefect.settings import get_current_settings

    usage = resource.getrusage(resource.RUSAGE_SELF)
    url = get_current_settings().api.url
    value = os.environ.get(probe.variable)
    return WorkerStart(usage.ru_utime + usage.ru_stime, str(url) if url else None, value)
