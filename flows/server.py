"""Whether a Prefect server records the runs of the commands (`gpufleet ingest`, `build`)."""

from __future__ import annotations

import os


def prefect_server_configured() -> bool:
    """PREFECT_API_URL in the environment or in the active Prefect profile. Without one,
    `ingest` and `build` call the engine the flows call, as the deployments' flows would,
    minus the run's record: a flow would start Prefect's temporary server, 15-18 s of a
    20 s `gpufleet build` with nothing to build (0.1 s of work) on a 2-core machine."""
    if os.environ.get("PREFECT_API_URL"):
        return True
    from prefect.settings import get_current_settings

    return bool(get_current_settings().api.url)
