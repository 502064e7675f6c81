"""The one exception type the campaign front ends turn into a clean message."""

from ..errors import VllmOpsError


class CampaignInputError(VllmOpsError):
    """Bad input: the message is one line naming what was wrong."""
