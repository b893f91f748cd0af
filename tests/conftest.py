"""Shared fixtures: a configuration over an empty data directory, a local SMTP inbox, one
temporary Prefect server, one real Slurm and one real S3 store for the whole session."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.config import Config
from tests.report_fixtures import Inbox, smtp_inbox
from tests.s3_stack import S3Store, S3Unavailable, s3_store
from tests.slurm_stack import SlurmStack, SlurmUnavailable, slurm_stack

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


@pytest.fixture
def config(tmp_path: Path) -> Config:
    """The default configuration over an empty data directory, `tmp_path / "data"`."""
    return Config(data_dir=tmp_path / "data")


@pytest.fixture
def inbox() -> Iterator[tuple[Inbox, int]]:
    """A local SMTP server that keeps what it receives: its inbox and its port."""
    with smtp_inbox() as running:
        yield running


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmStack]:
    """A real Slurm 22.05 (munge, MariaDB, slurmdbd, slurmctld, two slurmd with fake GPUs),
    started once per session on first use and stopped at its end (tests/slurm_stack.py)."""
    with contextlib.ExitStack() as running:
        try:
            stack = running.enter_context(slurm_stack())
        except SlurmUnavailable as exc:
            pytest.fail(str(exc))
        yield stack


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Store]:
    """A real S3 store (SeaweedFS, tests/s3_stack.py) with one bucket, started once per
    session on first use; a test that stops it starts it again (`s3.start()`)."""
    with contextlib.ExitStack() as running:
        try:
            store = running.enter_context(s3_store(tmp_path_factory.mktemp("s3")))
        except S3Unavailable as exc:
            pytest.fail(str(exc))
        yield store
