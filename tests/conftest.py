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
# One DuckDB thread a connection (gpufleet/warehouse/base/connect.py): `make test` runs a
# worker more than the cores, and each DuckDB with a thread per core spent some 15 % more CPU
# on the suite's small fleets, synchronising threads that had next to nothing to share.
os.environ.setdefault("GPUFLEET_THREADS", "1")
REPO_DATA = Path(__file__).resolve().parents[1] / "data"

if "PREFECT_HOME" not in os.environ:
    # A throwaway Prefect home (its database, its logs) for this test session only.
    _prefect_home = tempfile.mkdtemp(prefix="gpufleet-prefect-home-")
    os.environ["PREFECT_HOME"] = _prefect_home
    atexit.register(shutil.rmtree, _prefect_home, ignore_errors=True)

if "GPUFLEET_CACHE_DIR" not in os.environ:
    # The report's Vega bundle (reports/disk_cache.py) kept for this test run only, never in
    # the user's ~/.cache: made by the first worker that renders a page, read by the others
    # and by the gpufleet processes the tests start.
    _cache_dir = tempfile.mkdtemp(prefix="gpufleet-cache-")
    os.environ["GPUFLEET_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def away_from_the_repository(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The tests run in a throwaway working directory: a `Config()` or a command left on
    its default data directory (`./data`) uses a folder of this session's, never the
    repository's data/, which `make demo` fills (pytest_sessionfinish checks that too)."""
    before = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    yield
    os.chdir(before)


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One Prefect server (`prefect_test_harness`) for the whole pytest run; request it in
    tests that run flows. Under pytest-xdist the first worker that needs it starts it, the
    others use it (tests/prefect_runs.py reads back a test's own runs), and the one that
    started it stops it once no worker uses it (tests/shared_server.py)."""
    from tests.shared_server import shared_prefect_server

    with shared_prefect_server(_run_folder(tmp_path_factory)):
        yield


def _run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this pytest run that all its xdist workers share (each worker's base
    temporary folder is a subfolder of the run's)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


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


# The fixtures that start a real stack: Slurm (tests/slurm_stack.py), S3 (tests/s3_stack.py)
# and a Prefect server. A test that uses one, itself or through a fixture of its own, is
# marked `stack` here; tests of the other stacks (Prometheus, a Dask cluster, Chromium) are
# marked in their files. `make test-fast` leaves them out.
STACK_FIXTURES = frozenset({"slurm", "s3", "prefect_harness"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if STACK_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.stack)
    items[:] = in_file_order(items)


def in_file_order(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests file by file (each file's in its own order), the files that start a process,
    a server or a stack (a test marked `slow` or `stack`) first, then by how many tests they
    hold, most first. `make test` runs the files in this order on its workers
    (`--dist loadfile --no-loadscope-reorder`): pytest-xdist's own order, by the number of
    tests only, started the slow files, which hold a few tests each, last, and one worker
    ran them while the others had finished."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def starts_processes(tests: list[pytest.Item]) -> bool:
        return any(
            test.get_closest_marker("slow") or test.get_closest_marker("stack") for test in tests
        )

    order = sorted(files, key=lambda name: (not starts_processes(files[name]), -len(files[name])))
    return [item for name in order for item in files[name]]


_DATA_BEFORE = pytest.StashKey[dict[str, tuple[int, int]]]()


def _data_listing() -> dict[str, tuple[int, int]]:
    """The repository's data/ as (size, mtime in ns) by relative path."""
    if not REPO_DATA.is_dir():
        return {}
    listing = {}
    for path in sorted(REPO_DATA.rglob("*")):
        try:
            stat = path.lstat()
        except FileNotFoundError:  # gone since the listing (a `make demo` running beside)
            continue
        listing[str(path.relative_to(REPO_DATA))] = (stat.st_size, stat.st_mtime_ns)
    return listing


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_DATA_BEFORE] = _data_listing()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when any test wrote, changed or deleted a file in the repository's
    data/ (after `make demo` it holds the demo's fleet: no test may touch it)."""
    before = session.config.stash.get(_DATA_BEFORE, None)
    if before is None:
        return
    after = _data_listing()
    changed = sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )
    if changed:
        listed = ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else "")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"FAILED: the tests changed the repository's data/: {listed}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
