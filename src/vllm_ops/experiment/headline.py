"""The one-line headline of an experiment report (``report.json``'s ``headline``)."""

from __future__ import annotations

from collections.abc import Mapping

from .analysis import CATEGORY_ORDER, UNMEASURED, point_words
from .load import REPLAY


def _metric(label: str, cmp: Mapping, where: str) -> str:
    noise = f"(+/-{cmp['noise_pct']:.1f}%)"
    if cmp["verdict"] == "no change":
        return f"{label} no change {noise} {where}"
    return f"{label} {cmp['change_pct']:+.1f}% {noise} {where}"


def _count(category: str, n: int) -> str:
    if category == "no change":
        return f"{n} variant{'s' if n != 1 else ''} no change"
    if category == "trade-off":
        return f"{n} trade-off{'s' if n != 1 else ''}"
    if category == "better":
        return f"{n} more better"
    return f"{n} {category}"


def counts_text(entries: list[Mapping], skip: Mapping | None = None) -> list[str]:
    """"2 variants no change", "1 failed", ... in ranking order, non-zero ones only."""
    out = []
    for cat in CATEGORY_ORDER:
        n = sum(1 for e in entries if e["category"] == cat and e is not skip)
        if n:
            out.append(_count(cat, n))
    return out


def drift_text(drifts: list[Mapping], host: str | None = None) -> str | None:
    """``baseline drifted +3.1% (TPOT at 1)``: the largest drift outside its noise, or None."""
    worst = None
    for d in drifts:
        for key, label in (("tpot", "TPOT"), ("throughput", "throughput")):
            fig = d[key]
            if fig["drifted"] and (worst is None or abs(fig["change_pct"]) > abs(worst[0])):
                worst = (fig["change_pct"], label, d["concurrency"])
    if worst is None:
        return None
    on = f" on {host}" if host else ""
    return f"baseline{on} drifted {worst[0]:+.1f}% ({worst[1]} at {worst[2]})"


def headline(ranking: list[Mapping], baselines: list[Mapping], drifts: Mapping[str, list], *,
             label_key: str = "name") -> str:
    """The headline from the ranked variant entries, the baselines and each host's drift list
    (host -> drift entries). ``label_key`` is ``label`` (``name @ host``) in a fleet report."""
    unmeasured = [b for b in baselines if not b.get("measured")]
    drift_parts = [t for host, d in drifts.items()
                   if (t := drift_text(d, host if len(drifts) > 1 else None))]
    if unmeasured and len(unmeasured) == len(baselines):
        hosts = ", ".join(b["host"] for b in unmeasured)
        why = "; ".join(dict.fromkeys(b.get("unmeasured") or UNMEASURED for b in unmeasured))
        parts = [f"the baseline could not be measured on {hosts} ({why}), so no variant was compared"]
        failed = sum(1 for e in ranking if e["category"] == "failed")
        if failed:
            parts.append(f"{failed} failed")
        return "; ".join(parts)
    best = ranking[0] if ranking and ranking[0]["category"] == "better" else None
    if best is not None:
        tpot, thr = best["headline"]["tpot"], best["headline"]["throughput"]
        # the throughput's point said short, "at 32", after the TPOT's "at concurrency 1"
        at_tpot = point_words(tpot["concurrency"])
        at_thr = point_words(thr["concurrency"]) if thr["concurrency"] == REPLAY else f"at {thr['concurrency']}"
        head = f"best: {best[label_key]}: {_metric('TPOT', tpot, at_tpot)}; {_metric('throughput', thr, at_thr)}"
        rest = counts_text(ranking, skip=best)
        parts = [head, *rest]
    else:
        rest = counts_text(ranking)
        parts = ["no variant beat the baseline: " + ("; ".join(rest) if rest else "no variants")]
    if unmeasured:
        parts.append("baseline not measured on " + ", ".join(b["host"] for b in unmeasured))
    parts.extend(drift_parts)
    return "; ".join(parts)
