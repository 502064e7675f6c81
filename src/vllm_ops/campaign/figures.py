"""The headline: how much of the decode CUDA time all-reduce takes, in one line per host.

Definition (used by the headline, the history CSV and the report alike):

* Only ranks with figures count: those whose GPU time was measured (the summarizer's
  ``gpu_time_measured``: the trace holds GPU kernel events) and whose ``cuda_ms_per_step``
  is not null (it is null for a rank with no decode steps, and for a rank without GPU
  kernels). A rank without GPU kernels is *not measured*: its missing figures are never
  read as zeros, and the headline names it.
* When no rank has GPU kernels (vLLM's CPU backend), nothing is measured: every figure
  is None and the headline says ``no GPU kernels in the traces: all-reduce share not
  measured``, with the decode steps the CPU annotations show.
* ``allreduce_ms_per_step`` is the mean over those ranks of each rank's all-reduce
  ms per decode step (the summarizer's ``allreduce.ms_per_step_mean``).
* ``cuda_ms_per_step`` is the mean over the same ranks of each rank's CUDA ms per step.
* ``allreduce_share`` is the ratio of those two means, i.e. all-reduce time summed over
  ranks divided by CUDA time summed over ranks. So "51.5% (11.17 of 21.70 ms/step)"
  always holds arithmetically. This is *not* the summarizer's ``allreduce.share_mean``
  (the mean of per-rank shares), which differs when ranks have unequal CUDA time: a rank
  that waits in all-reduce for a slow peer has a large share of a large CUDA time.
* ``skew_corrected_ms`` is the summarizer's ``allreduce.ms_per_step_skew_corrected``
  (the transfer time per step without waiting for other ranks), or null.

Those kernel-time figures include waiting inside collectives (a rank that waits for a late
peer spins in the all-reduce kernel) and every outlier step. The headline therefore leads
with the summarizer's *verdict* and its steady decode step (:func:`steady_figures`, from
``verdict.evidence``: the verdict's rank's mean steady period, GPU busy time, all-reduce
transfer and the longest wait of another rank); the kernel-time share stays in the report,
labelled as including waiting. Summaries from before the verdict existed get the old line.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean

from ..job import JobInputError, downtime_text
from ..records.summary import checked
from ..traces.render import verdict_sentence
from .errors import CampaignInputError

NOT_MEASURED = "no GPU kernels in the traces: all-reduce share not measured"


def rank_measured(rank: Mapping) -> bool:
    """Whether a summary rank entry's GPU time was measured (its trace holds GPU kernels).

    Summaries written before ``gpu_time_measured`` existed left ``cuda_ms_per_step`` null
    despite decode steps only when the trace had no GPU kernels, so that is read the same."""
    flag = rank.get("gpu_time_measured")
    if flag is not None:
        return bool(flag)
    return not (rank.get("cuda_ms_per_step") is None and (rank.get("decode_steps") or 0) > 0)


def ranks_text(ranks: list) -> str:
    """``rank 1`` or ``ranks 1, 3``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(str(r) for r in ranks)


def decode_figures(summary: Mapping) -> dict:
    """The headline figures of a summary (see the module docstring for the definition).

    Returns ``{allreduce_ms_per_step, cuda_ms_per_step, allreduce_share, skew_corrected_ms,
    decode_steps, ranks_used, ranks_total, gpu_time_measured, ranks_not_measured, reason}``;
    the figures are None and ``reason`` is a plain sentence when the traces hold nothing to
    measure. ``gpu_time_measured`` is False when no rank has GPU kernels;
    ``ranks_not_measured`` lists the ranks without them.
    """
    summary = checked(summary)
    ranks = summary["ranks"]
    measured = [r for r in ranks if rank_measured(r)]
    unmeasured = [r.get("rank") for r in ranks if not rank_measured(r)]
    live = [r for r in measured if r.get("cuda_ms_per_step") is not None]
    steps = [r.get("decode_steps") or 0 for r in ranks]
    out = {
        "allreduce_ms_per_step": None, "cuda_ms_per_step": None, "allreduce_share": None,
        "skew_corrected_ms": None, "decode_steps": min(steps) if steps else 0,
        "ranks_used": len(live), "ranks_total": len(ranks), "gpu_time_measured": bool(measured),
        "ranks_not_measured": unmeasured, "reason": None,
    }
    if not ranks:
        out["reason"] = "the summary has no ranks (no trace was read)"
    elif not measured:
        out["reason"] = NOT_MEASURED
    elif not any(r.get("decode_steps") for r in measured):
        pattern = summary.get("decode_pattern") or "?"
        out["reason"] = f"no decode steps in the traces (no GPU annotation matches '{pattern}')"
        if unmeasured:
            out["reason"] += f"; {ranks_text(unmeasured)} not measured: no GPU kernels"
    elif not live:
        out["reason"] = "no rank has decode CUDA time"
    if out["reason"]:
        return out
    try:
        cuda = fmean(float(r["cuda_ms_per_step"]) for r in live)
        allreduce = fmean(float(r.get("allreduce_ms_per_step") or 0.0) for r in live)
        skew = (summary.get("allreduce") or {}).get("ms_per_step_skew_corrected")
        skew = None if skew is None else float(skew)
    except (TypeError, ValueError) as exc:
        raise CampaignInputError(f"malformed trace summary: {exc}") from None
    if cuda <= 0:
        out["reason"] = "no GPU activity starts inside the decode steps, so there is no decode CUDA time"
        return out
    out.update({
        "allreduce_ms_per_step": round(allreduce, 4), "cuda_ms_per_step": round(cuda, 4),
        "allreduce_share": round(allreduce / cuda, 4), "skew_corrected_ms": skew,
        "decode_steps": min(r.get("decode_steps") or 0 for r in live),
    })
    return out


def steady_figures(summary: Mapping) -> dict:
    """The verdict and its steady decode step, for the headline and the history.

    Returns ``{verdict, verdict_rank, straggler, steady_steps, period_ms, busy_ms, idle_ms,
    transfer_ms, wait_ms}``; all None for a summary without a verdict (older summaries, or
    nothing measured) and the figures None for an inconclusive one. ``idle_ms`` is the
    period minus the busy time (GPU idle inside and outside the step window)."""
    summary = checked(summary)
    v = summary.get("verdict") or {}
    ev = v.get("evidence") or {}
    straggler = ((summary.get("collectives") or {}).get("straggler") or {})
    rank = ev.get("rank")
    decomp = next((r.get("decomposition") for r in summary["ranks"] if r.get("rank") == rank), None) or {}
    period, busy = ev.get("period_ms"), ev.get("busy_ms")
    return {
        "verdict": v.get("kind"),
        "verdict_rank": v.get("rank"),
        "straggler": straggler.get("rank") if straggler.get("named") else None,
        "steady_steps": decomp.get("steps"),
        "period_ms": period,
        "busy_ms": busy,
        "idle_ms": round(period - busy, 4) if period is not None and busy is not None else None,
        "transfer_ms": ev.get("allreduce_transfer_ms"),
        # another rank's longest wait for the verdict's rank (max_wait_ms in summaries before issue 30)
        "wait_ms": ev.get("other_wait_ms", ev.get("max_wait_ms")),
    }


def fmt_ms(value: float) -> str:
    """Milliseconds for a sentence: 2 decimals from 1 ms up, 3 significant digits below."""
    if value == 0 or abs(value) >= 0.995:
        return f"{value:.2f}"
    return f"{value:.3g}"


def headline(host: str, summary: Mapping, report_path: str | None = None, downtime: Mapping | None = None) -> str:
    """The campaign's one line (:func:`_headline_figures`), then the downtime the campaign cost,
    when a health poller recorded it (:func:`downtime_text`), then ``-> report``."""
    if report_path is not None and not isinstance(report_path, str):
        raise CampaignInputError(f"report_path must be a string, got {type(report_path).__name__}")
    line = _headline_figures(host, summary)
    try:
        down = downtime_text(downtime)
    except JobInputError as exc:
        raise CampaignInputError(str(exc)) from None
    return line + (f"; {down}" if down else "") + (f" -> {report_path}" if report_path else "")


def _headline_figures(host: str, summary: Mapping, report_path: str | None = None) -> str:
    """One line per host, for example ``vllm-sandbox: all-reduce 51.5% of decode CUDA time
    (11.17 of 21.70 ms/step; skew-corrected 9.80 ms) -> artifacts/.../report.md``.

    Without anything to measure, the line says why instead of giving numbers; without GPU
    kernels in any trace it is ``vllm-cpu: no GPU kernels in the traces: all-reduce share not
    measured (15 decode steps; 1 warning)``. Ranks without GPU kernels beside others that have
    some are named in the parenthesis (``rank 1 not measured: no GPU kernels``), never
    averaged in. With ``report_path`` None or empty the ``-> path`` part is left out.
    """
    if not isinstance(host, str) or not host:
        raise CampaignInputError(f"host must be a non-empty string, got {host!r}")
    if report_path is not None and not isinstance(report_path, str):
        raise CampaignInputError(f"report_path must be a string, got {type(report_path).__name__}")
    fig = decode_figures(summary)
    tail = f" -> {report_path}" if report_path else ""
    n_warn = len(summary.get("warnings") or [])
    warn = [f"{n_warn} warning{'s' if n_warn != 1 else ''}"] if n_warn else []
    if summary.get("verdict") and fig["gpu_time_measured"]:
        extra = [f"{ranks_text(fig['ranks_not_measured'])} not measured: no GPU kernels"] \
            if fig["ranks_not_measured"] else []
        extra += warn
        return f"{host}: {verdict_sentence(summary)}{' (' + '; '.join(extra) + ')' if extra else ''}{tail}"
    if fig["reason"] and fig["ranks_total"] and not fig["gpu_time_measured"]:
        steps = f"{fig['decode_steps']} decode steps" if fig["decode_steps"] else "no decode steps"
        return f"{host}: {fig['reason']} ({'; '.join([steps, *warn])}){tail}"
    if fig["reason"]:
        return f"{host}: {fig['reason']}; no all-reduce figures{tail}"
    details = [f"{fmt_ms(fig['allreduce_ms_per_step'])} of {fmt_ms(fig['cuda_ms_per_step'])} ms/step"]
    if fig["skew_corrected_ms"] is not None:
        details.append(f"skew-corrected {fmt_ms(fig['skew_corrected_ms'])} ms")
    else:
        details.append("no skew correction")
    if fig["ranks_used"] < fig["ranks_total"]:
        details.append(f"{fig['ranks_used']} of {fig['ranks_total']} ranks")
    if fig["ranks_not_measured"]:
        details.append(f"{ranks_text(fig['ranks_not_measured'])} not measured: no GPU kernels")
    details += warn
    return (f"{host}: all-reduce {100 * fig['allreduce_share']:.1f}% of decode CUDA time "
            f"({'; '.join(details)}){tail}")
