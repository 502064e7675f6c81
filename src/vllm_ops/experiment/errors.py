"""The one exception type the experiment front ends turn into a clean message."""

from ..errors import VllmOpsError


class ExperimentInputError(VllmOpsError):
    """Bad input: the message names the file or field, what was wrong and what to do."""
