"""What the tests read back from the Prefect server, limited to their own runs: the session's
server is one for the whole pytest run (tests/conftest.py's `prefect_harness`), so other
workers' flows run there too. A flow run is a test's own when its `data_dir` parameter is
the test's data directory (every gpufleet flow takes one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID


def own_flow_runs(data_dir: Path | str, flow: str | None = None) -> list[Any]:
    """The flow runs (of `flow`, by name, or all) whose `data_dir` is `data_dir`, among the
    server's latest 200 (a test's own runs are its last few)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        names = {found.id: found.name for found in client.read_flows()}
        runs = client.read_flow_runs(sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=200)
    return [
        run
        for run in runs
        if str(run.parameters.get("data_dir")) == str(data_dir)
        and (flow is None or names.get(run.flow_id) == flow)
    ]


def own_completed_task_runs(data_dir: Path | str, name_like: str) -> list[Any]:
    """The completed task runs named like `name_like` in the flow runs of `data_dir`."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        TaskRunFilter,
        TaskRunFilterFlowRunId,
        TaskRunFilterName,
    )

    ids: list[UUID] = [run.id for run in own_flow_runs(data_dir)]
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            task_run_filter=TaskRunFilter(
                name=TaskRunFilterName(like_=name_like),
                flow_run_id=TaskRunFilterFlowRunId(any_=ids),
            )
        )
    return [run for run in runs if run.state and run.state.is_completed()]
