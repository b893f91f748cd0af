"""A configured Prefect server that does not answer: `gpufleet serve`, and `ingest`, `build`
and `report`, which run as flows when one is configured, fail in one line that names its URL
and says what to do, with exit status 1 and no traceback.

The dead server is a loopback port held bound without listening for the test's length, so
that a connection to it is refused and no other server of the suite takes it meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from gpufleet.errors import GpufleetError
from gpufleet.flows.server import configured_server_answers
from tests.ports import free_port

START_IT = "start it (`prefect server start`), or unset PREFECT_API_URL"


@pytest.fixture
def dead_api_url() -> Iterator[str]:
    """The API URL of a Prefect server that is not there: its port refuses connections."""
    with contextlib.closing(socket.socket()) as held:
        port = free_port()
        held.bind(("127.0.0.1", port))  # bound, never listening: a connect is refused
        yield f"http://127.0.0.1:{port}/api"


def _gpufleet(tmp_path: Path, api_url: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`gpufleet ARGUMENTS` over an empty data directory, with PREFECT_API_URL its only
    Prefect setting (no profile, no settings file in its working directory)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PREFECT_") or key == "PREFECT_SERVER_ANALYTICS_ENABLED"
    }
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_API_URL=api_url)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "--data-dir", str(data_dir), *arguments],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a command that failed with status 1 wrote to stderr, and no traceback."""
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert result.returncode == 1, output
    assert result.stderr.count("\n") == 1, output
    return result.stderr.rstrip("\n")


@pytest.mark.slow  # starts processes
def test_serve_says_in_one_line_that_the_configured_server_did_not_answer(
    tmp_path: Path, dead_api_url: str
) -> None:
    result = _gpufleet(tmp_path, dead_api_url, "serve")

    assert _one_error_line(result) == (
        f"gpufleet: error: the Prefect server at {dead_api_url} did not answer: {START_IT} "
        "to let serve start a temporary one of its own"
    )
    assert "deployments on" not in result.stdout  # it never said it served


@pytest.mark.slow  # starts processes
@pytest.mark.parametrize("arguments", [["ingest"], ["build"], ["report", "--week", "2026-W47"]])
def test_a_flow_command_says_in_one_line_that_the_configured_server_did_not_answer(
    tmp_path: Path, dead_api_url: str, arguments: list[str]
) -> None:
    result = _gpufleet(tmp_path, dead_api_url, *arguments)

    assert _one_error_line(result) == (
        f"gpufleet: error: the Prefect server at {dead_api_url} did not answer: {START_IT} "
        "to run the command without one"
    )
    assert result.stdout == ""


def test_only_the_configured_server_not_answering_becomes_that_line(dead_api_url: str) -> None:
    """An address other than the configured server's (an S3 store, Prometheus) keeps its
    own error; the configured one's, also when Prefect raised another error from it, is
    the one line."""
    other = httpx.Request("GET", "http://127.0.0.1:9/metrics")
    ours = httpx.Request("GET", f"{dead_api_url}/deployments/name/x/y")
    with temporary_settings(updates={PREFECT_API_URL: dead_api_url}):
        with pytest.raises(httpx.ConnectError), configured_server_answers("to go on"):
            raise httpx.ConnectError("Connection refused", request=other)
        with pytest.raises(GpufleetError) as raised, configured_server_answers("to go on"):
            try:
                raise httpx.ReadTimeout("timed out", request=ours)
            except httpx.ReadTimeout as timeout:
                raise RuntimeError(f"Failed to reach API at {dead_api_url}/") from timeout
    assert str(raised.value) == (
        f"the Prefect server at {dead_api_url} did not answer: {START_IT} to go on"
    )


def test_the_line_never_shows_the_password_of_a_url_with_credentials(dead_api_url: str) -> None:
    """A PREFECT_API_URL that carries a user and password (a proxy's basic auth) is named
    with its password as `***`: the line may end up in a log."""
    with_password = dead_api_url.replace("http://", "http://ops:s3cret@")
    ours = httpx.Request("GET", f"{with_password}/flow_runs")
    with (
        temporary_settings(updates={PREFECT_API_URL: with_password}),
        pytest.raises(GpufleetError) as raised,
        configured_server_answers("to go on"),
    ):
        raise httpx.ConnectError("Connection refused", request=ours)
    shown = dead_api_url.replace("http://", "http://ops:***@")
    assert str(raised.value) == f"the Prefect server at {shown} did not answer: {START_IT} to go on"
    assert "s3cret" not in str(raised.value)
