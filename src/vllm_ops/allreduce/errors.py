"""The one exception type of the all-reduce floor's readers and its command."""

from ..errors import VllmOpsError


class AllreduceInputError(VllmOpsError):
    """Bad input (a floor file, an argument): the message is one line naming the file or argument."""
