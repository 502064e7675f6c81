"""How a rank's profiled time divides among the phases: decode, prefill and mixed steps, each
its own figure, so that no decode figure holds a prefill's work and the prefills still show.

The steps' periods partition the capture (:mod:`.timeline`: a step's period ends where the next
step of any phase begins), so the phases' times add up to the time of the steps that have a
period. Definitions (per rank and phase, over the rank's steps of that phase):

* ``steps``: how many; ``with_period``: how many have a period (the last step of a capture has
  none).
* ``time_ms``: the sum of their periods; ``time_share``: that over the sum of every step's
  period on the rank (null where no step has one).
* ``period_ms``, ``window_ms``, ``busy_ms``: the medians of the steps' figures (null where none
  has one); ``allreduce_calls``: the median all-reduce calls a step.
* For mixed steps only: ``decode_requests`` and ``prefill_requests`` (summed over the steps) and
  ``decode_token_share``: the generation tokens over the scheduled tokens, summed over the
  steps, where every step's name gives both (else null): the decode share of their work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median

from .annotations import MIXED, PHASES


def split(steps: Sequence[Mapping]) -> dict[str, dict]:
    """``{phase: figures}`` for each phase the rank's step rows hold (see the module docstring)."""
    total = sum(s["period_ms"] for s in steps if s.get("period_ms") is not None)
    out = {}
    for phase in PHASES:
        rows = [s for s in steps if s.get("phase") == phase]
        if not rows:
            continue
        periods = [s["period_ms"] for s in rows if s.get("period_ms") is not None]
        time = sum(periods)
        fig = {"steps": len(rows), "with_period": len(periods), "time_ms": _r(time),
               "time_share": round(time / total, 4) if total > 0 else None,
               "period_ms": _median(periods), "window_ms": _median(s.get("window_ms") for s in rows),
               "busy_ms": _median(s.get("busy_ms") for s in rows),
               "allreduce_calls": _median(s.get("allreduce_calls") for s in rows)}
        if phase == MIXED:
            tok = [(s.get("generation_tokens"), s.get("scheduled_tokens")) for s in rows]
            fig.update(decode_requests=sum(s.get("generation_requests") or 0 for s in rows),
                       prefill_requests=sum(s.get("context_requests") or 0 for s in rows),
                       decode_token_share=(round(sum(g for g, _ in tok) / sum(t for _, t in tok), 4)
                                           if all(g is not None and t for g, t in tok) else None))
        out[phase] = fig
    return out


def _median(values) -> float | None:
    x = [v for v in values if v is not None]
    return _r(float(median(x))) if x else None


def _r(v: float) -> float:
    return round(float(v), 4)
