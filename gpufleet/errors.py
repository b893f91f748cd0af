"""The one exception type for failures the user must act on."""


class GpufleetError(Exception):
    """A user-facing failure; the CLI prints its message as one line and exits non-zero.

    Raise it `from` the underlying cause, with a message that names the file (and line,
    where there is one) and the problem.
    """
