"""The all-reduce floor as a PNG: latency per call against message size (:func:`write_floor_chart`)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..charts import figure, save_png

__all__ = ["write_floor_chart"]


def write_floor_chart(floors: Mapping | list[Mapping], path: str | os.PathLike) -> dict:
    """Latency per call against message size (log-log), the decode sizes marked with their batch
    size: for one floor its median with the p90 above it, for several (the unit's environment,
    then NCCL variants) one median line each. PNG, atomic write. Returns ``{path, sizes}``."""
    floors = [floors] if isinstance(floors, Mapping) else list(floors)
    base = floors[0]
    sizes = base["sizes"]
    fig = figure(8.0, 5.0)
    ax = fig.add_subplot()
    for i, floor in enumerate(floors):
        label = "median" if len(floors) == 1 else (floor.get("label") or f"run {i + 1}")
        ax.plot([s["bytes"] for s in floor["sizes"]], [s["median_us"] for s in floor["sizes"]], marker="o",
                label=label, zorder=3)
    if len(floors) == 1 and all(s.get("p90_us") is not None for s in sizes):
        ax.plot([s["bytes"] for s in sizes], [s["p90_us"] for s in sizes], linestyle="--", color="#8c8c8c",
                label="p90", zorder=2)
    for s in sizes:
        if s.get("batch_size") is not None:
            ax.annotate(f"batch {s['batch_size']}", (s["bytes"], s["median_us"]), textcoords="offset points",
                        xytext=(0, 8), ha="center", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size, bytes")
    ax.set_ylabel("time per all-reduce, µs")
    world = base.get("world_size")
    title = (f"All-reduce {'floor' if len(floors) == 1 else 'by variant'}: {world} rank{'' if world == 1 else 's'}, "
             f"{base.get('backend')}, {base.get('gpu_name') or 'no GPU'}")
    if world == 1:
        title += "\n(one rank moves no data: the host's cost per call, not a floor)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = save_png(fig, path)
    return {"path": str(path), "sizes": len(sizes)}
