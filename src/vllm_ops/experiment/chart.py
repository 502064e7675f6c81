"""PNG charts of an experiment report, in the project's style (:mod:`vllm_ops.charts`):

- :func:`write_throughput_chart`: output throughput against concurrency (log2 axis), one line per
  variant and baseline, error bars from the runs' min to max; a failed point is left out, never drawn
  as zero, and a variant that failed after some points is dotted and labelled "(failed)".
- :func:`write_tpot_chart`: median TPOT per variant at each concurrency, grouped bars with min-max
  error bars; a variant or point without figures is marked "failed" where its bar would stand.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..charts import PALETTE, figure, save_png
from .analysis import THROUGHPUT, TPOT
from .load import REPLAY

_BASE_COLOURS = ("#202020", "#606060", "#8c8c8c", "#b0b0b0")


def _series(report: Mapping) -> list[tuple[Mapping, str, str]]:
    """(entry, label, colour): the baselines in greys, then the variants in the palette."""
    fleet = report.get("kind") == "fleet"
    out = [(b, b["label"] if fleet else "baseline", _BASE_COLOURS[i % len(_BASE_COLOURS)])
           for i, b in enumerate(report["baselines"])]
    colours = PALETTE * 8
    out += [(v, v["label"] if fleet else v["name"], colours[i]) for i, v in enumerate(report["variants"])]
    return out


def _title(report: Mapping, what: str) -> str:
    return f"{what}\nexperiment {report['id']}, {', '.join(report['hosts'])}"


def write_throughput_chart(report: Mapping, path: str | os.PathLike) -> dict:
    """Draw the throughput chart; returns ``{path, lines, points}`` (lines drawn, points plotted)."""
    fig = figure(8.5, 5.2)
    ax = fig.add_subplot()
    lines = points = 0
    for entry, label, colour in _series(report):
        got = [(p["concurrency"], p["metrics"][THROUGHPUT]) for p in entry["points"]
               if p["status"] == "ok" and p["metrics"][THROUGHPUT]["center"] is not None]
        if not got:
            continue
        xs = [c for c, _ in got]
        ys = [m["center"] for _, m in got]
        err = [[y - m["min"] for y, (_, m) in zip(ys, got, strict=True)],
               [m["max"] - y for y, (_, m) in zip(ys, got, strict=True)]]
        base, failed = entry["is_baseline"], entry["status"] == "failed"
        # a variant that failed later on keeps what it measured, dotted and labelled as failed
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=colour, zorder=3,
                    label=f"{label} (failed)" if failed else label,
                    linestyle="--" if base else (":" if failed else "-"), linewidth=2.0 if base else 1.4)
        lines += 1
        points += len(xs)
    if not lines:
        ax.text(0.5, 0.5, "No throughput to chart:\nno point completed a request.", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    else:
        conc = report["load"]["concurrencies"]
        if conc == [REPLAY]:
            # a replay's one point: the recording's own arrivals, no concurrency to scale
            ax.set_xticks([REPLAY], ["the replayed traffic"])
        else:
            ax.set_xscale("log", base=2)
            ax.set_xticks(conc, [str(c) for c in conc])
            ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("output throughput, tokens/s (median; bars: min-max over runs)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(_title(report, "Output throughput against concurrency"), fontsize=10)
    return {"path": str(save_png(fig, path)), "lines": lines, "points": points}


def write_tpot_chart(report: Mapping, path: str | os.PathLike) -> dict:
    """Draw the TPOT chart; returns ``{path, bars, failed}`` (bars drawn, "failed" marks)."""
    series = _series(report)
    conc = report["load"]["concurrencies"]
    fig = figure(max(7.0, 0.35 * len(series) * len(conc) + 4.0), 5.2)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(series))
    top = max((p["metrics"][TPOT]["max"] or 0.0 for e, _, _ in series for p in e["points"]
               if p["status"] == "ok"), default=0.0) or 1.0
    bars = marks = 0
    for k, (entry, _label, colour) in enumerate(series):
        for g, p in enumerate(entry["points"]):
            x = g - 0.4 + width * (k + 0.5)
            m = p["metrics"][TPOT]
            if entry["status"] == "failed" or p["status"] != "ok" or m["center"] is None:
                unrun = entry["status"] != "failed" and p["status"] == "not measured"
                ax.text(x, 0.02 * top, "not run" if unrun else "failed", rotation=90,
                        ha="center", va="bottom", fontsize=7, color=colour)
                ax.plot([x], [0], marker="x", color=colour, markersize=7, zorder=4)
                marks += 1
                continue
            ax.bar([x], [m["center"]], width=width * 0.95, color=colour, zorder=3,
                   yerr=[[m["center"] - m["min"]], [m["max"] - m["center"]]], capsize=2,
                   hatch="//" if entry["is_baseline"] else None, edgecolor="white")
            bars += 1
    ax.set_xticks(range(len(conc)), ["the replayed traffic" if c == REPLAY else str(c) for c in conc])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("median TPOT, ms (bars: min-max over runs)")
    ax.set_ylim(0, top * 1.12)
    ax.grid(axis="y", alpha=0.3, zorder=0)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor=c, hatch="//" if e["is_baseline"] else None, edgecolor="white",
                             label=f"{label} (failed)" if e["status"] == "failed" else label)
                       for e, label, c in series], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(_title(report, "Median TPOT per variant (lower is better)"), fontsize=10)
    return {"path": str(save_png(fig, path)), "bars": bars, "failed": marks}
