"""PNG charts of a campaign: kernel time per decode step by category, one stacked bar per rank
(:func:`write_chart`; kernel-time sums, so all-reduce includes waiting), and each decode step's
period split into its parts, per rank, outliers marked (:func:`write_steps_chart`), and the decode
ledger's parts of the steady step, each measured beside its floor (:func:`write_ledger_chart`).

Nothing unmeasured is drawn as a zero-height bar: a rank whose trace has no GPU kernels gets
"no GPU kernels: not measured" where its bar would stand, and when no rank has any (vLLM's
CPU backend) the chart is a text saying so, and the campaign goes on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..charts import HIGHLIGHT, PALETTE, figure, save_png
from ..ledger import FLOORED_PARTS, PARTS
from ..records.summary import checked
from ..traces.steps import exposed_allreduce
from .figures import decode_figures, rank_measured

ALLREDUCE = "allreduce"


def chart_title(host: str | None = None, campaign_id: str | None = None) -> str:
    base = "Decode kernel time per step by category (all-reduce includes waiting)"
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
    summary = checked(summary)
    ranks = summary["ranks"]
    fig_info = decode_figures(summary)
    live = [r for r in ranks if rank_measured(r) and r.get("cuda_ms_per_step") is not None]
    cats = _categories(live)

    fig = figure(max(6.0, 1.6 * len(ranks) + 4.0), 5.5)
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
    path = save_png(fig, path)
    return {"path": str(path), "bars": bars, "ranks": [r.get("rank") for r in ranks], "categories": cats,
            "note": note}


def chart_line(drawn: Mapping) -> str:
    """What :func:`write_chart` did, in one line: ``wrote PATH (8 bars, 2 ranks)``."""
    note = f"; {drawn['note']}" if drawn["note"] else ""
    return f"wrote {drawn['path']} ({drawn['bars']} bars, {len(drawn['ranks'])} ranks{note})"


def _draw(ax, ranks: list, cats: list[str]) -> None:
    xs = list(range(len(ranks)))
    labels = [f"rank {r.get('rank')}" for r in ranks]
    has = [rank_measured(r) and r.get("cuda_ms_per_step") is not None for r in ranks]
    bottoms = [0.0] * len(ranks)
    colours = iter(PALETTE * 4)
    for name in cats:
        live_x = [x for x in xs if has[x]]
        heights = [float(((ranks[x].get("categories") or {}).get(name) or {}).get("ms_per_step") or 0.0)
                   for x in live_x]
        is_ar = name == ALLREDUCE
        container = ax.bar(
            live_x, heights, width=0.6, bottom=[bottoms[x] for x in live_x],
            color=HIGHLIGHT if is_ar else next(colours), edgecolor="black" if is_ar else "white",
            linewidth=1.2 if is_ar else 0.5, hatch="//" if is_ar else None,
            label=f"{name} (highlighted)" if is_ar else name, zorder=3,
        )
        if is_ar:  # name the value where the segment is tall enough to hold it
            tallest = max(float(ranks[x].get("cuda_ms_per_step") or 0.0) for x in live_x) or 1.0
            ax.bar_label(container, labels=[f"{h:.2f} ms" if h >= 0.05 * tallest else ""
                                            for h in heights],
                         label_type="center", fontsize=8, color="white", fontweight="bold")
        for x, h in zip(live_x, heights, strict=True):
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



STEP_PARTS = (  # (label, colour): the parts of a step's period, bottom up
    ("compute busy", "#4c72b0"),
    ("all-reduce transfer", HIGHLIGHT),
    ("all-reduce waiting", "#f4a582"),
    ("GPU idle in window", "#d0d0d0"),
    ("host, outside window", "#8c8c8c"),
)


def step_parts(step: Mapping) -> list[float] | None:
    """A step's period split as in the summarizer's decomposition (ms), or None without GPU
    figures. The last step has no period: its host part is 0 and the bar is its window."""
    busy = step.get("busy_ms_by_category")
    if busy is None or step.get("window_ms") is None:
        return None
    compute = sum(v for k, v in busy.items() if k != ALLREDUCE)
    transfer, wait = exposed_allreduce(step)
    host = step["host_ms"] if step.get("host_ms") is not None else 0.0
    return [compute, transfer, wait, step.get("idle_ms") or 0.0, host]


def steps_line(drawn: Mapping) -> str:
    """What :func:`write_steps_chart` did, in one line: ``wrote PATH (24 steps, 2 ranks, 2 left out)``."""
    note = f"; {drawn['note']}" if drawn["note"] else ""
    return (f"wrote {drawn['path']} ({drawn['steps']} steps, {len(drawn['ranks'])} ranks, "
            f"{drawn['left_out']} left out{note})")


def write_steps_chart(summary: Mapping, path: str | os.PathLike, *, host: str | None = None,
                      campaign_id: str | None = None) -> dict:
    """Per rank, one stacked bar per decode step: its period split into compute busy,
    all-reduce transfer, all-reduce waiting, GPU idle inside the window and host time outside
    it; steps the steady-state rule left out are hatched and labelled. PNG, atomic write.
    Returns ``{path, ranks, steps, left_out, note}``; a summary without per-step GPU figures
    gets a text instead of bars (``note``)."""
    summary = checked(summary)
    ranks = [r for r in summary["ranks"] if rank_measured(r) and any(
        step_parts(s) for s in (r.get("steps") or []) if s.get("phase") == "decode")]
    rows = max(1, len(ranks))
    fig = figure(11.0, 2.6 * rows + 1.2)
    where = ", ".join(p for p in (host, f"campaign {campaign_id}" if campaign_id else None) if p)
    fig.suptitle("Decode steps: where each step's time goes" + (f"\n{where}" if where else ""), fontsize=11)
    drawn, left = 0, 0
    note = None
    if not ranks:
        ax = fig.add_subplot()
        note = "no per-step GPU figures in the summary (no GPU kernels, or a summary from an older version)"
        ax.text(0.5, 0.5, f"No per-step chart:\n{note}.", ha="center", va="center", wrap=True,
                transform=ax.transAxes)
        ax.set_axis_off()
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0] if ranks else []
    for ax, r in zip(axes, ranks, strict=False):
        steps = [s for s in r["steps"] if s.get("phase") == "decode" and step_parts(s)]
        xs = [s["index"] for s in steps]
        parts = [step_parts(s) for s in steps]
        bottom = [0.0] * len(steps)
        for k, (label, colour) in enumerate(STEP_PARTS):
            heights = [p[k] for p in parts]
            ax.bar(xs, heights, bottom=bottom, color=colour, width=0.8, label=label, zorder=3,
                   hatch=["//" if not s.get("steady") else None for s in steps], edgecolor="white", linewidth=0.4)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        steady_tops = sorted(b for b, s in zip(bottom, steps, strict=True) if s.get("steady")) or sorted(bottom)
        cap = steady_tops[len(steady_tops) // 2] * 3.0 if steady_tops else None
        for x, b, s in zip(xs, bottom, steps, strict=True):
            if not s.get("steady"):
                left += 1
                ax.annotate(f"left out\n{b:.1f} ms", (x, min(b, cap) if cap else b), ha="center", va="bottom",
                            fontsize=7, xytext=(0, 2), textcoords="offset points")
        if cap and max(bottom) > cap:
            ax.set_ylim(0, cap * 1.15)  # an outlier step must not flatten the others: its bar is clipped
        ax.set_ylabel(f"rank {r.get('rank')}\nms", fontsize=9)
        ax.grid(axis="y", alpha=0.3, zorder=0)
        drawn += len(steps)
    if ranks:
        from matplotlib.patches import Patch

        axes[-1].set_xlabel("decode step (index in the trace)")
        handles = [Patch(facecolor=c, label=label) for label, c in STEP_PARTS]
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="left out of the steady state"))
        axes[0].legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path = save_png(fig, path)
    return {"path": str(path), "ranks": [r.get("rank") for r in ranks], "steps": drawn, "left_out": left,
            "note": note}


LEDGER_BARS = (("measured", "#4c72b0"), ("floor", "#55a868"))


def ledger_line(drawn: Mapping) -> str:
    """What :func:`write_ledger_chart` did, in one line: ``wrote PATH (14 bars, 2 ranks)``."""
    note = f"; {drawn['note']}" if drawn["note"] else ""
    return f"wrote {drawn['path']} ({drawn['bars']} bars, {len(drawn['ranks'])} ranks{note})"


def write_ledger_chart(summary: Mapping, path: str | os.PathLike, *, host: str | None = None,
                       campaign_id: str | None = None) -> dict:
    """The decode ledger (the summary's ``ledger``), per rank: each part of the steady decode step,
    measured, beside its floor (ms), with "not measured" written where the ledger left a figure
    null, never a bar of height 0. PNG, atomic write. Returns ``{path, ranks, bars, note}``; a
    summary without a ledger (no checkpoint given) gets a text instead of bars (``note``)."""
    summary = checked(summary)
    ledger = summary.get("ledger") or {}
    ranks = [r for r in ledger.get("ranks") or [] if r.get("parts")]
    rows = max(1, len(ranks))
    fig = figure(11.0, 2.8 * rows + 1.2)
    where = ", ".join(p for p in (host, f"campaign {campaign_id}" if campaign_id else None) if p)
    fig.suptitle("The steady decode step against its floor, part by part (ms per step)"
                 + (f"\n{where}" if where else ""), fontsize=11)
    note = None
    if not ranks:
        ax = fig.add_subplot()
        note = ("no decode ledger: no checkpoint was given (capture.json's checkpoint)" if not ledger else
                "the decode ledger has no rank with a steady decode step")
        ax.text(0.5, 0.5, f"No ledger chart:\n{note}.", ha="center", va="center", wrap=True, transform=ax.transAxes)
        ax.set_axis_off()
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0] if ranks else []
    bars = 0
    for ax, r in zip(axes, ranks, strict=False):
        parts = {p["part"]: p for p in r["parts"]}
        xs = list(range(len(PARTS)))
        top = max([v for p in parts.values() for v in (p.get("measured_ms"), p.get("floor_ms")) if v] or [1.0])
        for k, (key, colour) in enumerate(LEDGER_BARS):
            values = [(parts.get(name) or {}).get(f"{key}_ms") for name in PARTS]
            at = [x + (k - 0.5) * 0.38 for x in xs]
            shown = [(x, v) for x, v in zip(at, values, strict=True) if v is not None]
            ax.bar([x for x, _ in shown], [v for _, v in shown], width=0.36, color=colour, label=key, zorder=3)
            bars += len(shown)
            for x, v in zip(at, values, strict=True):
                if v is None:
                    ax.text(x, 0.02 * top, "not\nmeasured", ha="center", va="bottom", fontsize=7, rotation=90)
        ax.set_xticks(xs, [name.replace("_", " ") + ("" if name in FLOORED_PARTS else "\n(floor 0: no term)")
                           for name in PARTS], fontsize=8)
        fl = r.get("floors") or {}
        headroom = (f"headroom {r['headroom_ms']:.2f} ms" if r.get("headroom_ms") is not None else
                    f"headroom at most {r['headroom_at_most_ms']:.2f} ms" if r.get("headroom_at_most_ms") is not None
                    else "headroom not measured")
        bw = r.get("bandwidth") or {}
        ax.set_title(f"rank {r.get('rank')}: period {r['period_ms']:.2f} ms, floor "
                     + (f"{fl['total']:.2f} ms" if fl.get("total") is not None else "not measured")
                     + f", {headroom}; bandwidth "
                     + (f"{bw['gbps']:.0f} GB/s ({bw.get('source')})" if bw.get("gbps") else "unknown"), fontsize=9)
        ax.set_ylabel("ms", fontsize=9)
        ax.set_ylim(0, top * 1.15)
        ax.grid(axis="y", alpha=0.3, zorder=0)
    if ranks:
        axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path = save_png(fig, path)
    return {"path": str(path), "ranks": [r.get("rank") for r in ranks], "bars": bars, "note": note}
