"""Shared fixtures. Prefect runs against one temporary server for the whole session."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
if "PREFECT_HOME" not in os.environ:
    # A throwaway Prefect home (its database, its logs) for this test session only.
    _prefect_home = tempfile.mkdtemp(prefix="gpufleet-prefect-home-")
    os.environ["PREFECT_HOME"] = _prefect_home
    atexit.register(shutil.rmtree, _prefect_home, ignore_errors=True)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One `prefect_test_harness` per test session; request it in tests that run flows."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
