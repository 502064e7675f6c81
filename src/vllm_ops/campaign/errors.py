"""The one exception type the campaign front ends turn into a clean message."""


class CampaignInputError(ValueError):
    """Bad input: the message is one line naming what was wrong."""
