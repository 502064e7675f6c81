"""The one exception type of the decode ledger."""

from ..errors import VllmOpsError


class LedgerInputError(VllmOpsError):
    """Bad input (a checkpoint record, a summary, a figure): the message is one line naming it."""
