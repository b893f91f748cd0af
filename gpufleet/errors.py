"""The one exception type for failures the user must act on, and how to tell a full disk."""

from __future__ import annotations

import errno
import os
import re


class GpufleetError(Exception):
    """A user-facing failure; the CLI prints its message as one line and exits non-zero.

    Raise it `from` the underlying cause, with a message that names the file (and line,
    where there is one) and the problem.
    """


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# DuckDB and pyarrow name the error only in their messages.
_DISK_FULL_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))


def disk_full_path(exc: BaseException) -> str | None:
    """The file a write failed on for want of space (ENOSPC, EDQUOT), or "" when the error
    does not name it; None when `exc` (or the error it was raised from) is another one."""
    for error in (exc, exc.__cause__):
        if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
            return os.fsdecode(error.filename) if error.filename else ""
        text = str(error) if error is not None else ""
        if any(words in text for words in _DISK_FULL_TEXTS):
            named = re.search(r'"([^"]+)"', text) or re.search(r"'([^']+)'", text)
            return named.group(1) if named else ""
    return None
