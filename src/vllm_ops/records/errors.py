"""The one exception type of the records: the message names the file, the field and what to do."""

from ..errors import VllmOpsError


class RecordError(VllmOpsError):
    """A record that cannot be read or written as its module defines it."""
