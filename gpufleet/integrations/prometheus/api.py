"""The few Prometheus HTTP API calls the importer makes, through the standard library.

Every failure (no answer, an HTTP error, an answer that is not the API's JSON, an error the
API reports) becomes one `PrometheusError` naming the query and the problem. The timeout
bounds a whole request (connecting, sending, the headers and the body), not each read of the
socket: a server that answers one byte a second fails in `timeout_s` like one that is silent.
"""

from __future__ import annotations

import functools
import http.client
import io
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any, TypedDict

import msgspec

from gpufleet.errors import GpufleetError


class PrometheusError(GpufleetError):
    """Prometheus could not answer a query, or answered something the importer cannot use."""


# A range query's answer in the shape Prometheus gives it, each point decoded as a tuple: the
# garbage collector stops tracking a tuple of a number and a text, never a list (a window of
# a thousand GPUs is 700,000 points, and collections over lists of them took as long as the
# parse). An answer of any other shape is read as any JSON and checked as such.
class _Series(TypedDict):
    metric: dict[str, str]
    values: list[tuple[float, str]]


class _Matrix(TypedDict):
    resultType: str
    result: list[_Series]


class _MatrixAnswer(TypedDict):
    status: str
    data: _Matrix


_MATRIX_ANSWER = msgspec.json.Decoder(_MatrixAnswer)


class PrometheusApi:
    """`query_range`, `series`, `label_values` against one server (`url`, e.g.
    `http://prometheus:9090`, or a path prefix behind a proxy)."""

    def __init__(self, *, url: str, timeout_s: float) -> None:
        if not url.startswith(("http://", "https://")):
            raise PrometheusError(f"prometheus: not an http(s) URL: {url!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        # One opener for every request (building one reads the environment's proxies and
        # wires a dozen handlers: about half a millisecond, per request of a thousand a
        # window); each request's deadline travels in its thread.
        self._opener = urllib.request.build_opener(_DeadlineHTTPHandler(), _DeadlineHTTPSHandler())

    def query_range(
        self, query: str, *, start_s: float, end_s: float, step_s: float
    ) -> list[dict[str, Any]]:
        """The series of a range query: each `{"metric": {labels}, "values": [[ts, "v"]]}`."""
        data = self._get(
            "/api/v1/query_range",
            [
                ("query", query),
                ("start", _num(start_s)),
                ("end", _num(end_s)),
                ("step", _num(step_s)),
            ],
            what=f"query '{query}'",
            decoder=_MATRIX_ANSWER,
        )
        if not isinstance(data, dict) or data.get("resultType") != "matrix":
            raise PrometheusError(f"query '{query}': the answer is not a matrix")
        result = data.get("result")
        if not isinstance(result, list):
            raise PrometheusError(f"query '{query}': the answer has no result list")
        return result

    def series(
        self, matchers: Sequence[str], *, start_s: float, end_s: float
    ) -> list[dict[str, str]]:
        """The label sets of the series that match any of `matchers` in [start, end]."""
        params = [("match[]", m) for m in matchers]
        params += [("start", _num(start_s)), ("end", _num(end_s))]
        data = self._get("/api/v1/series", params, what=f"series {' or '.join(matchers)}")
        if not isinstance(data, list) or not all(isinstance(labels, dict) for labels in data):
            raise PrometheusError(
                f"series {' or '.join(matchers)}: the answer is not a list of label sets"
            )
        return data

    def label_values(
        self,
        label: str,
        *,
        matchers: Sequence[str] = (),
        start_s: float | None = None,
        end_s: float | None = None,
    ) -> list[str]:
        """The values `label` takes (on the series that match `matchers`, in [start, end])."""
        params = [("match[]", m) for m in matchers]
        if start_s is not None and end_s is not None:
            params += [("start", _num(start_s)), ("end", _num(end_s))]
        what = f"values of label '{label}'" + (f" on {' or '.join(matchers)}" if matchers else "")
        data = self._get(f"/api/v1/label/{urllib.parse.quote(label)}/values", params, what=what)
        if not isinstance(data, list) or not all(isinstance(v, str) for v in data):
            raise PrometheusError(f"{what}: the answer is not a list of strings")
        return data

    def _get(
        self,
        path: str,
        params: list[tuple[str, str]],
        *,
        what: str,
        decoder: msgspec.json.Decoder[Any] | None = None,
    ) -> Any:
        address = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(address, headers={"Accept": "application/json"})
        _request_deadline.at = time.monotonic() + self.timeout_s
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise PrometheusError(
                f"{what}: HTTP {exc.code} from {self.url}: {_api_error(exc)}"
            ) from exc
        except TimeoutError as exc:
            raise PrometheusError(self._timed_out(what)) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise PrometheusError(self._timed_out(what)) from exc
            raise PrometheusError(f"{what}: cannot reach {self.url}: {_reason(exc)}") from exc
        except (OSError, ValueError, http.client.HTTPException) as exc:  # cut off mid-answer
            raise PrometheusError(f"{what}: cannot read the answer of {self.url}: {exc}") from exc
        try:
            answer = _decoded(body, decoder)
        except ValueError as exc:
            raise PrometheusError(
                f"{what}: {self.url} did not answer with Prometheus API JSON"
            ) from exc
        if not isinstance(answer, dict) or answer.get("status") != "success":
            problem = answer.get("error") if isinstance(answer, dict) else None
            raise PrometheusError(f"{what}: Prometheus answered: {problem or 'not a success'}")
        return answer.get("data")

    def _timed_out(self, what: str) -> str:
        return f"{what}: {self.url} timed out after {self.timeout_s:g} s"


# The deadline of a request, threaded through urllib (which keeps its proxies, redirects and
# TLS): its connections wait on every read and write only for what is left of it. A thread
# makes one request at a time: `_request_deadline.at` is the deadline of its request.
_request_deadline = threading.local()


def _time_left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the request's deadline has passed")
    return left


class _DeadlineSocket:
    """A connected socket whose writes, and reads through `makefile`, end at `deadline`."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(_time_left(self._deadline))
        self._sock.sendall(data)

    def makefile(self, mode: str, *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def __getattr__(self, name: str) -> Any:  # close, fileno, ...: the socket's own
        return getattr(self._sock, name)


class _DeadlineReader(io.RawIOBase):
    """The socket's raw reader (which keeps the socket open until it is closed itself), each
    read of it waiting only for what is left until `deadline`."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(_time_left(self._deadline))
        return self._raw.readinto(buffer)

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        self.timeout = _time_left(self._deadline)
        super().connect()  # HTTPS: the TLS handshake too
        self.sock = _DeadlineSocket(self.sock, self._deadline)


class _DeadlineHTTPSConnection(_DeadlineHTTPConnection, http.client.HTTPSConnection):
    pass


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        deadline = _request_deadline.at
        return self.do_open(functools.partial(_DeadlineHTTPConnection, deadline=deadline), req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        deadline = _request_deadline.at
        return self.do_open(  # the default TLS context, as urlopen's
            functools.partial(_DeadlineHTTPSConnection, deadline=deadline), req
        )


def _decoded(body: bytes, decoder: msgspec.json.Decoder[Any] | None) -> Any:
    """`body` as `decoder` reads it, or, when it does not fit (or no decoder), as any JSON."""
    if decoder is not None:
        try:
            return decoder.decode(body)
        except msgspec.MsgspecError:
            pass
    return json.loads(body)


def _num(value: float) -> str:
    """A number as the API reads it: seconds, without a float's noise."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def _reason(exc: urllib.error.URLError) -> str:
    reason = exc.reason
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason)


def _api_error(exc: urllib.error.HTTPError) -> str:
    """The API's own error text when the body carries one, else the HTTP reason."""
    try:
        answer = json.loads(exc.read())
    except (ValueError, OSError):
        return str(exc.reason)
    if isinstance(answer, dict) and answer.get("error"):
        return f"{answer.get('errorType', 'error')}: {answer['error']}"
    return str(exc.reason)
