"""The one exception type the front ends turn into a clean message."""

from ..errors import VllmOpsError


class TraceInputError(VllmOpsError):
    """Bad input: the message is one line that names the file (if any) and the problem."""
