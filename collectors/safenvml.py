"""The one wrapper around NVML's calls, and the policy it applies to NVML's errors.

Every query goes through one `Nvml` wrapper (`call` for a pynvml function by name, `query`
for any other call), as gpustat's `safenvml` and nvitop's `nvmlQuery` do:

- NotSupported / NoPermission: the value is null and the (GPU, metric) pair is never asked again;
- FunctionNotFound / NVMLLibraryMismatchError: the next, older API of the query is used, and
  the missing one is never called again;
- NotFound: an empty result (an empty sample buffer, an empty MIG slot);
- GpuIsLost / ResetRequired / Unknown: `GpuLostError`, so the GPU's row becomes `status='lost'`;
- Uninitialized: `NvmlUninitializedError`, so the collector calls `nvmlInit` again.

pynvml functions are looked up at call time, so tests can replace them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pynvml

from gpufleet.errors import GpufleetError

T = TypeVar("T")

UNSUPPORTED_ERRORS = (pynvml.NVMLError_NotSupported, pynvml.NVMLError_NoPermission)
LOST_ERRORS = (
    pynvml.NVMLError_GpuIsLost,
    pynvml.NVMLError_ResetRequired,
    pynvml.NVMLError_Unknown,
)
_MISSING_API = (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError)
_NO_DRIVER = (
    pynvml.NVMLError_LibraryNotFound,
    pynvml.NVMLError_DriverNotLoaded,
    pynvml.NVMLError_LibRmVersionMismatch,
)

_NEXT_API = object()  # `Nvml._failed`: this API is missing, try the next


class GpuLostError(Exception):
    """A GPU answered GpuIsLost, ResetRequired or Unknown: its row this tick is `lost`."""


class NvmlUninitializedError(Exception):
    """NVML answered Uninitialized (a driver reload): call `nvmlInit` again."""


class NvmlUnavailableError(GpufleetError):
    """NVML cannot be loaded or initialised on this host."""


def init_nvml() -> None:
    """`nvmlInit`, turning a missing library or driver into one clear `NvmlUnavailableError`."""
    try:
        pynvml.nvmlInit()
    except _NO_DRIVER as exc:
        raise NvmlUnavailableError(
            f"cannot use NVML ({exc}): is the NVIDIA driver installed and loaded on this host?"
        ) from exc
    except pynvml.NVMLError as exc:
        raise NvmlUnavailableError(f"cannot initialise NVML: {exc}") from exc


def shutdown_nvml() -> None:
    """`nvmlShutdown`, ignoring errors: it is only ever called on the way out or to re-init."""
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlShutdown()


class Nvml:
    """The one wrapper around NVML queries; remembers what each GPU and the library lack."""

    def __init__(self) -> None:
        self._unsupported: set[tuple[str, str]] = set()
        self._missing_apis: set[str] = set()

    def is_unsupported(self, uuid: str, metric: str) -> bool:
        return (uuid, metric) in self._unsupported

    def mark_unsupported(self, uuid: str, metric: str) -> None:
        self._unsupported.add((uuid, metric))

    def forget_unsupported(self) -> None:
        """Ask everything again (after a driver reload, support may have changed)."""
        self._unsupported.clear()

    def call(
        self, uuid: str, metric: str, apis: Sequence[str], *args: Any, not_found: Any = None
    ) -> Any:
        """The first of `apis` (pynvml function names, newest first) that this library has,
        called with `args`.

        Returns None when the metric is unsupported for this GPU (and caches that), or
        `not_found` when NVML answers NotFound. Other transient errors give None this time.
        """
        # The collector's hot path (some 30 calls per GPU per tick): no closure, no extra frame.
        if (uuid, metric) in self._unsupported:
            return None
        for name in apis:
            if name in self._missing_apis:
                continue
            try:
                return getattr(pynvml, name)(*args)
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
                answer = self._failed(exc, uuid, metric, name, not_found)
                if answer is not _NEXT_API:
                    return answer
        self._unsupported.add((uuid, metric))
        return None

    def query(
        self,
        uuid: str,
        metric: str,
        *apis: tuple[str, Callable[[], T]],
        not_found: T | None = None,
    ) -> T | None:
        """Like `call`, for calls that are not one pynvml function by name: each `(name, call)`."""
        if (uuid, metric) in self._unsupported:
            return None
        for name, invoke in apis:
            if name in self._missing_apis:
                continue
            try:
                return invoke()
            except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
                answer = self._failed(exc, uuid, metric, name, not_found)
                if answer is not _NEXT_API:
                    return answer
        self._unsupported.add((uuid, metric))
        return None

    def _failed(self, exc: Exception, uuid: str, metric: str, name: str, not_found: Any) -> Any:
        """The answer for a call of `name` that raised `exc`, by the policy above:
        `_NEXT_API` to try the next, older API. Raises GpuLostError / NvmlUninitializedError."""
        if isinstance(exc, _MISSING_API):
            self._missing_apis.add(name)
            return _NEXT_API
        if isinstance(exc, UNSUPPORTED_ERRORS):
            self._unsupported.add((uuid, metric))
            return None
        if isinstance(exc, pynvml.NVMLError_NotFound):
            return not_found
        if isinstance(exc, LOST_ERRORS):
            raise GpuLostError(uuid) from exc
        if isinstance(exc, pynvml.NVMLError_Uninitialized):
            raise NvmlUninitializedError(uuid) from exc
        return None
