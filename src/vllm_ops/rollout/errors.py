"""The one exception type the rollout front end turns into a clean message."""

from ..errors import VllmOpsError


class RolloutInputError(VllmOpsError):
    """Bad input: the message names the file or field, what was wrong and what to do."""
