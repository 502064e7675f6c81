"""What the summary tells its reader beside the figures, as data: a :class:`Note` is one thing an
analyzer found (a file skipped, a rank missing, a step left out of the steady state, a host stall),
with the facts that say it. Analyzers return notes; only :mod:`.words` turns them into the
summary's ``warnings``, in the order a reader needs them (:data:`SECTIONS`): why no decode steps
were found and the pattern to try, then which ranks are missing and what to fetch, then the PCIe
findings, then the rest, each section in the order the analyzers found them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["SECTIONS", "Note", "note"]

SECTIONS = ("front", "missing", "fabric", "rest")


@dataclass(frozen=True)
class Note:
    """One finding for the reader: ``code`` names what (:data:`.words.WORDS` has its words),
    ``facts`` the figures and names the words need, ``section`` where it goes (:data:`SECTIONS`)."""

    code: str
    facts: Mapping = field(default_factory=dict)
    section: str = "rest"

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"note {self.code!r}: section {self.section!r} is not one of {', '.join(SECTIONS)}")


def note(code: str, section: str = "rest", **facts: object) -> Note:
    """``Note(code, facts, section)``, the facts as keywords."""
    return Note(code, facts, section)
