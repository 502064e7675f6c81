"""Does the summary hold the whole group: the ranks present, the ranks missing, what to fetch.

Definitions:

* ``world_size``: the largest ``distributedInfo.world_size`` among the traces read; where no
  trace says, the ranks present plus the files skipped (``--keep-going``), or null when none
  was skipped.
* ``missing``: the ranks below ``world_size`` without a readable trace; ``unreadable``: the
  files skipped as unreadable, each a rank that is missing too.
* ``complete``: nothing is missing (always true without a ``world_size``).
* ``fetch``: for each missing rank, the file to fetch, as a glob: vLLM names rank r's trace
  ``*rank{r}.*.pt.trace.json*``; the present files' own name with the rank number replaced
  where their names carry one.

Without every rank of the group, a collective's transfer cannot be told from the time a rank
waited in it, and the rank that limits the run may be one that is missing: the verdict is then
``partial`` (:mod:`.verdict`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .notes import Note, note

if TYPE_CHECKING:
    from .run import Run

_RANK = re.compile(r"(rank[_-]?)(\d+)", re.IGNORECASE)


def analyze(run: Run) -> tuple[dict, list[Note]]:
    """:func:`check` over the run's ranks and the files that could not be read, and a note where ranks
    are missing."""
    ranks = run.ranks
    cover = check([r["rank"] for r in ranks], [r["file"] for r in ranks], [r["world_size"] for r in ranks],
                  run.loaded.unreadable)
    return cover, [note("ranks_missing", "missing", coverage=cover)] if cover["missing"] else []


def check(present: Sequence[int], files: Sequence[str], world_sizes: Sequence[int | None],
          unreadable: Sequence[str] = ()) -> dict:
    """``{world_size, present, missing, unreadable, complete, fetch: [{rank, glob}]}``."""
    sizes = [w for w in world_sizes if w]
    world = max(sizes) if sizes else (len(present) + len(unreadable) if unreadable else None)
    have = sorted(set(present))
    missing = [r for r in range(world) if r not in have] if world else []
    return {"world_size": world, "present": have, "missing": missing, "unreadable": list(unreadable),
            "complete": not missing, "fetch": [{"rank": r, "glob": _glob(r, files)} for r in missing]}


def _glob(rank: int, files: Sequence[str]) -> str:
    for f in files:
        name = os.path.basename(f)
        hits = list(_RANK.finditer(name))
        if hits:
            last = hits[-1]
            head = name[:last.start()]
            stem = _retp(head, last.group(2), rank)
            tail = re.sub(r"\.\d{10,}\.", ".*.", name[last.end():])
            return f"{stem}{last.group(1)}{rank}{tail}"
    return f"*rank{rank}.*.pt.trace.json*"


def _retp(head: str, own: str, rank: int) -> str:
    """vLLM's ``tp{r}`` carries the rank too (where it equals the ``rank{r}``): replace it there."""
    return re.sub(r"(?<![a-z])tp(\d+)", lambda m: f"tp{rank}" if m.group(1) == own else m.group(0), head)
