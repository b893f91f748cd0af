"""One Prefect test server for a whole pytest run, shared by its xdist workers.

Each worker used to start its own `prefect_test_harness` (about 10 CPU s: the server's
imports and a new database's migrations). Now the first worker that needs a server runs
the harness and writes its API URL to a file in the run's shared folder, the others waiting
for it; every worker (that one too) holds a shared `flock` on a users file while it uses
the server. At the end of its session the worker that started it waits until it can take
that lock alone, that is until no other worker uses the server, removes the URL file and
only then leaves the harness, which stops the server. A worker that comes later starts a
new one: the URL file is read, written and removed under a second lock, so a worker never
gets the URL of a server that is stopping.

The server runs without the services that no test uses (`SERVER_SETTINGS`), which cost CPU
at its start and on every event.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

# How long the server's owner waits for the other workers to finish with it.
OWNER_WAITS_S = 3600
# Prefect's settings (prefect.settings.models.server) that the harness passes on to the
# server's process. The tests read back flow runs, task runs (the task-run recorder writes
# them from the clients' events) and artifacts, never events or logs through the API, and
# create no automation, so the server runs:
# - no event persister: it writes every event (3 a task run) to the database;
# - no triggers: automations' reactive and proactive triggers (every 5 s) and their actions;
# - no registration of Prefect's block types as it starts (about 1 CPU s: it imports every
#   installed collection, prefect-dask with Dask's distributed, and writes them all to the
#   new database), nor its check whether they changed, which imports them all the same;
#   no test saves a block (a client that saves one registers its type).
# The events and logs streamed out to websocket subscribers stay: they cost nothing
# measurable, and a served runner hears of a run's cancellation through them.
SERVER_SETTINGS = {
    "server.services.event_persister.enabled": False,
    "server.services.triggers.enabled": False,
    "server.register_blocks_on_start": False,
    "server.memoize_block_auto_registration": False,
}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def shared_prefect_server(folder: Path) -> Iterator[None]:
    """Prefect's settings point at the run's one test server while inside."""
    import prefect.context
    import prefect.settings
    from prefect.testing.utilities import prefect_test_harness

    lock, url_file = folder / "prefect-server.lock", folder / "prefect-server.url"
    with contextlib.ExitStack() as held:
        users = held.enter_context((folder / "prefect-server.users").open("a"))
        with _locked(lock):
            owner = not url_file.exists()
            if owner:
                # this process's settings too while the harness runs: only a server reads them
                held.enter_context(prefect.settings.temporary_settings(updates=SERVER_SETTINGS))
                held.enter_context(prefect_test_harness(server_startup_timeout=120))
                url_file.write_text(str(prefect.settings.PREFECT_API_URL.value()))
            else:
                url = prefect.settings.PREFECT_API_URL
                held.enter_context(
                    prefect.settings.temporary_settings(updates={url: url_file.read_text()})
                )
                held.enter_context(  # as the harness does, for contexts copied before
                    prefect.context._temporary_global_settings_context(
                        prefect.context.get_settings_context()
                    )
                )
            fcntl.flock(users, fcntl.LOCK_SH)  # taken before the lock goes: not stopping
        try:
            yield
        finally:
            fcntl.flock(users, fcntl.LOCK_UN)
            if owner:
                _wait_for_the_others(lock, users, url_file)


def _wait_for_the_others(lock: Path, users: IO[str], url_file: Path) -> None:
    """Return once no other worker uses the server, its URL file removed."""
    deadline = time.monotonic() + OWNER_WAITS_S
    while True:
        with _locked(lock):
            try:
                fcntl.flock(users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError("workers still use the shared Prefect server") from None
            else:
                url_file.unlink()
                return  # the lock on `users` goes with the file, after the harness
        time.sleep(0.5)
