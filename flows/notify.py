"""The daily idle notices flow: mail each user the waste episodes of a day, once.

The notices' modules are imported when the flow runs, not with this module: `gpufleet
serve` imports it for the deployment alone."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from prefect import flow, task
from prefect.cache_policies import NO_CACHE
from prefect.states import Failed

from gpufleet.config import Config, load_config
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from gpufleet.notices.idle import NoticeRun


def check_day(day: str) -> dt.date:
    """`day` as a date if it is one like 2026-11-16, else a GpufleetError."""
    try:
        return dt.date.fromisoformat(day)
    except ValueError as exc:
        raise GpufleetError(f"'{day}' is not a date like 2026-11-16") from exc


@task(name="idle-notices", cache_policy=NO_CACHE)
def send_idle_notices(
    config: Config, day: dt.date | None, send: bool, zone: str | None = None
) -> NoticeRun:
    """Write the day's notices, send them and record what the server accepted (no retries:
    a failure is reported at once, and a re-run sends only what was not sent)."""
    from gpufleet.notices.idle import SEND, WRITE, notify_idle

    return notify_idle(config, day=day, mode=SEND if send else WRITE, zone=zone)


@flow(name="idle-notices", log_prints=False)
def idle_notices_flow(
    data_dir: str = "data",
    config_path: str | None = None,
    day: str | None = None,
    send: bool = True,
    zone: str | None = None,
) -> str:
    """The idle notices of `day` (default: the last day that has ended at every site); with
    `zone`, of the sites in that time zone only (default: yesterday there)."""
    try:
        config = load_config(config_path=config_path, data_dir=data_dir)
        run = send_idle_notices(config, check_day(day) if day else None, send, zone)
    except GpufleetError as exc:
        # Prefect raises `exc` to the caller and logs the one line, not a traceback.
        return Failed(message=str(exc), data=exc)  # type: ignore[return-value]
    if run.failures:  # refused addresses: the others went out, and the run says so
        refused = GpufleetError(f"{run}\n" + "\n".join(run.failures))
        return Failed(message="; ".join(run.failures), data=refused)  # type: ignore[return-value]
    return str(run)


if __name__ == "__main__":
    print(idle_notices_flow())
