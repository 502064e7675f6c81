"""The one exception type the tune's front end turns into a clean message."""

from ..errors import VllmOpsError


class TuneInputError(VllmOpsError):
    """Bad input: the message names the file or field, what was wrong and what to do."""
