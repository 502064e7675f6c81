"""The one exception type the front ends turn into a clean message."""

from ..errors import VllmOpsError


class TraceInputError(VllmOpsError):
    """Bad input: the message is one line that names the file (if any) and the problem."""


class NotATraceError(TraceInputError):
    """The file is no Chrome trace at all (no ``traceEvents`` array, no bare array of events):
    a directory's other JSON files (a model's ``config.json``, a summary) are skipped on this."""
