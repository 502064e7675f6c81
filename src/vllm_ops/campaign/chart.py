"""PNG bar chart of decode CUDA time per step, by kernel category, one stacked bar per rank.

Nothing unmeasured is drawn as a zero-height bar: a rank whose trace has no GPU kernels gets
"no GPU kernels: not measured" where its bar would stand, and when no rank has any (vLLM's
CPU backend) the chart is a text saying so, and the campaign goes on.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .errors import CampaignInputError
from .figures import check_summary, decode_figures, rank_measured

ALLREDUCE = "allreduce"
_HIGHLIGHT = "#d62728"  # all-reduce: the one strong colour
_PALETTE = ("#4c72b0", "#8da0cb", "#55a868", "#a6d854", "#c9b23c", "#8172b3", "#937860",
            "#64b5cd", "#b0b0b0", "#da8bc3", "#606060", "#ccb974")


def chart_title(host: str | None = None, campaign_id: str | None = None) -> str:
    base = "Decode CUDA time per step by kernel category"
    where = ", ".join(p for p in (host, f"campaign {campaign_id}" if campaign_id else None) if p)
    return f"{base}\n{where}" if where else base


def _categories(ranks: list) -> list[str]:
    """Categories with time on any rank, in the summarizer's order (its table's order)."""
    names: list[str] = []
    for r in ranks:
        for name, v in (r.get("categories") or {}).items():
            if name not in names and ((v or {}).get("ms_per_step") or 0) > 0:
                names.append(name)
    return names


def write_chart(summary: Mapping, path: str | os.PathLike, *, host: str | None = None,
                campaign_id: str | None = None, title: str | None = None) -> dict:
    """Draw the chart to ``path`` (PNG, written atomically) and say what was drawn.

    Returns ``{path, bars, ranks, categories, note}``: ``bars`` is the number of bar segments
    matplotlib drew (one per rank with figures and category with time), so a chart with no
    GPU data has 0 and says why in its text instead, the sentence being ``note`` (None when
    there are bars).
    """
    check_summary(summary)
    ranks = summary["ranks"]
    fig_info = decode_figures(summary)
    live = [r for r in ranks if rank_measured(r) and r.get("cuda_ms_per_step") is not None]
    cats = _categories(live)

    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI

    fig = Figure(figsize=(max(6.0, 1.6 * len(ranks) + 4.0), 5.5), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(title or chart_title(host, campaign_id), fontsize=11)
    note = None
    if not live or not cats:
        note = fig_info["reason"] or "no category has decode CUDA time"
        text = f"No GPU data to chart:\n{note}."
        if ranks and not fig_info["gpu_time_measured"]:
            steps = fig_info["decode_steps"]
            text = ("No GPU kernel events in the traces (CPU-only run?):\n"
                    "GPU time and all-reduce share not measured.")
            if steps:
                text += f"\n\n{steps} decode steps were found in the annotations."
        ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, transform=ax.transAxes, fontsize=11)
        ax.set_axis_off()
    else:
        _draw(ax, ranks, cats)
    bars = len(ax.patches)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", metadata={"Software": None})
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return {"path": str(path), "bars": bars, "ranks": [r.get("rank") for r in ranks], "categories": cats,
            "note": note}


def _draw(ax, ranks: list, cats: list[str]) -> None:
    xs = list(range(len(ranks)))
    labels = [f"rank {r.get('rank')}" for r in ranks]
    has = [rank_measured(r) and r.get("cuda_ms_per_step") is not None for r in ranks]
    bottoms = [0.0] * len(ranks)
    colours = iter(_PALETTE * 4)
    for name in cats:
        live_x = [x for x in xs if has[x]]
        heights = [float(((ranks[x].get("categories") or {}).get(name) or {}).get("ms_per_step") or 0.0)
                   for x in live_x]
        is_ar = name == ALLREDUCE
        container = ax.bar(
            live_x, heights, width=0.6, bottom=[bottoms[x] for x in live_x],
            color=_HIGHLIGHT if is_ar else next(colours), edgecolor="black" if is_ar else "white",
            linewidth=1.2 if is_ar else 0.5, hatch="//" if is_ar else None,
            label=f"{name} (highlighted)" if is_ar else name, zorder=3,
        )
        if is_ar:  # name the value where the segment is tall enough to hold it
            tallest = max(float(ranks[x].get("cuda_ms_per_step") or 0.0) for x in live_x) or 1.0
            ax.bar_label(container, labels=[f"{h:.2f} ms" if h >= 0.05 * tallest else ""
                                            for h in heights],
                         label_type="center", fontsize=8, color="white", fontweight="bold")
        for x, h in zip(live_x, heights):
            bottoms[x] += h
    top = max(bottoms) or 1.0
    for x in xs:
        if has[x]:
            ax.text(x, bottoms[x] + 0.01 * top, f"{ranks[x]['cuda_ms_per_step']:.2f} ms",
                    ha="center", va="bottom", fontsize=9)
        elif not rank_measured(ranks[x]):
            ax.text(x, 0.02 * top, "no GPU kernels:\nnot measured", ha="center", va="bottom", fontsize=9)
        else:
            ax.text(x, 0.02 * top, "no GPU data", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(xs, labels)
    ax.set_xlim(-0.6, len(xs) - 0.4)
    ax.set_ylabel("CUDA ms per decode step")
    ax.set_ylim(0, top * 1.12)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.legend(title="category (summarizer order, bottom up)", fontsize=8, title_fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))

