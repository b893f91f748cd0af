"""Shared fixtures. Prefect runs against one temporary server for the whole session."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="gpufleet-prefect-home-"))


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One `prefect_test_harness` per test session; request it in tests that run flows."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
