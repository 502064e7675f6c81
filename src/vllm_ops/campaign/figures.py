"""The headline: how much of the decode CUDA time all-reduce takes, in one line per host.

Definition (used by the headline, the history CSV and the report alike):

* Only ranks with figures count: those whose ``cuda_ms_per_step`` is not null (the
  summarizer leaves it null for a rank with no decode steps or no GPU kernels).
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
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import fmean

from .errors import CampaignInputError


def check_summary(summary: object) -> Mapping:
    """Return ``summary`` when it looks like what ``vllm_ops.traces.summarize`` returns."""
    if not isinstance(summary, Mapping) or not isinstance(summary.get("ranks"), list):
        raise CampaignInputError(
            f"expected a trace summary (a mapping with a 'ranks' list), got {type(summary).__name__}"
        )
    for r in summary["ranks"]:
        if not isinstance(r, Mapping):
            raise CampaignInputError(f"malformed trace summary: a 'ranks' entry is a {type(r).__name__}")
    return summary


def decode_figures(summary: Mapping) -> dict:
    """The headline figures of a summary (see the module docstring for the definition).

    Returns ``{allreduce_ms_per_step, cuda_ms_per_step, allreduce_share, skew_corrected_ms,
    decode_steps, ranks_used, ranks_total, reason}``; the figures are None and ``reason`` is
    a plain sentence when the traces hold nothing to measure.
    """
    ranks = check_summary(summary)["ranks"]
    live = [r for r in ranks if r.get("cuda_ms_per_step") is not None]
    steps = [r.get("decode_steps") or 0 for r in ranks]
    out = {
        "allreduce_ms_per_step": None, "cuda_ms_per_step": None, "allreduce_share": None,
        "skew_corrected_ms": None, "decode_steps": min(steps) if steps else 0,
        "ranks_used": len(live), "ranks_total": len(ranks), "reason": None,
    }
    if not ranks:
        out["reason"] = "the summary has no ranks (no trace was read)"
    elif not any(steps):
        pattern = summary.get("decode_pattern") or "?"
        out["reason"] = f"no decode steps in the traces (no GPU annotation matches '{pattern}')"
    elif not live:
        out["reason"] = "the traces hold no GPU kernels (a CPU-only profile?), so there is no decode CUDA time"
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


def fmt_ms(value: float) -> str:
    """Milliseconds for a sentence: 2 decimals from 1 ms up, 3 significant digits below."""
    if value == 0 or abs(value) >= 0.995:
        return f"{value:.2f}"
    return f"{value:.3g}"


def headline(host: str, summary: Mapping, report_path: str | None = None) -> str:
    """One line per host, for example ``vllm-sandbox: all-reduce 51.5% of decode CUDA time
    (11.17 of 21.70 ms/step; skew-corrected 9.80 ms) -> artifacts/.../report.md``.

    Without anything to measure, the line says why instead of giving numbers. With
    ``report_path`` None or empty the ``-> path`` part is left out.
    """
    if not isinstance(host, str) or not host:
        raise CampaignInputError(f"host must be a non-empty string, got {host!r}")
    if report_path is not None and not isinstance(report_path, str):
        raise CampaignInputError(f"report_path must be a string, got {type(report_path).__name__}")
    fig = decode_figures(summary)
    tail = f" -> {report_path}" if report_path else ""
    if fig["reason"]:
        return f"{host}: {fig['reason']}; no all-reduce figures{tail}"
    details = [f"{fmt_ms(fig['allreduce_ms_per_step'])} of {fmt_ms(fig['cuda_ms_per_step'])} ms/step"]
    if fig["skew_corrected_ms"] is not None:
        details.append(f"skew-corrected {fmt_ms(fig['skew_corrected_ms'])} ms")
    else:
        details.append("no skew correction")
    if fig["ranks_used"] < fig["ranks_total"]:
        details.append(f"{fig['ranks_used']} of {fig['ranks_total']} ranks")
    n_warn = len(summary.get("warnings") or [])
    if n_warn:
        details.append(f"{n_warn} warning{'s' if n_warn != 1 else ''}")
    return (f"{host}: all-reduce {100 * fig['allreduce_share']:.1f}% of decode CUDA time "
            f"({'; '.join(details)}){tail}")
