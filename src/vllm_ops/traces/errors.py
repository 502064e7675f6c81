"""The one exception type the front ends turn into a clean message."""


class TraceInputError(ValueError):
    """Bad input: the message is one line that names the file (if any) and the problem."""
