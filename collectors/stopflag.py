"""`StopFlag`: what SIGTERM/SIGINT set, and the collector's sleep between ticks wakes on."""

from __future__ import annotations

import contextlib
import select
import signal
import socket
from collections.abc import Iterator
from types import FrameType


class StopFlag:
    """Set by SIGTERM/SIGINT (or `set()`); `wait()` sleeps until a deadline or the flag."""

    def __init__(self) -> None:
        self._set = False
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        with contextlib.suppress(OSError):  # a full buffer: the flag is set anyway
            self._writer.send(b"\0")

    def wait(self, timeout_s: float) -> None:
        if timeout_s > 0 and not self._set:
            readable, _, _ = select.select([self._reader], [], [], timeout_s)
            if readable and not self._set:  # another signal woke us: drain, go on sleeping
                with contextlib.suppress(OSError):
                    self._reader.recv(4096)

    def close(self) -> None:
        self._reader.close()
        self._writer.close()

    @contextlib.contextmanager
    def on_signals(self, *signums: int) -> Iterator[StopFlag]:
        def handler(signum: int, frame: FrameType | None) -> None:
            self.set()

        previous = {signum: signal.signal(signum, handler) for signum in signums}
        # The C-level handler writes to the socket too, so a signal delivered to any thread
        # wakes the select() of the main thread at once.
        previous_fd = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        try:
            yield self
        finally:
            signal.set_wakeup_fd(previous_fd)
            for signum, old in previous.items():
                signal.signal(signum, old)
