"""What every PNG chart of the project shares: the figure (matplotlib's Agg backend, no pyplot: no
global state, no GUI), the palette, and the atomic PNG write without a timestamp in it."""

from __future__ import annotations

import os
from pathlib import Path

from .artifacts import atomic_path

__all__ = ["HIGHLIGHT", "PALETTE", "figure", "save_png"]

HIGHLIGHT = "#d62728"  # all-reduce: the one strong colour
PALETTE = ("#4c72b0", "#8da0cb", "#55a868", "#a6d854", "#c9b23c", "#8172b3", "#937860",
           "#64b5cd", "#b0b0b0", "#da8bc3", "#606060", "#ccb974")


def figure(width: float, height: float):
    """A matplotlib Figure of ``width`` x ``height`` inches at 110 dpi, constrained layout."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def save_png(fig, path: str | os.PathLike) -> Path:
    """Write ``fig`` to ``path`` as PNG atomically (a temporary file beside it, then a rename)."""
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", metadata={"Software": None})
    return Path(path)
