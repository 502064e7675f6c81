"""Is the capture steady, and which rank limits the run: each rank's host time and GPU time per
step beside its period, and how far its host runs ahead of its GPU.

A tensor-parallel group runs at the pace of its slowest member, host or GPU. The rank that
arrives last at the collectives is not always that member: a host that began far ahead of its
GPU keeps its rank early while the lead lasts, and the lead shrinks every step by the time that
host needs beyond the group's pace. So each rank's own needs are read apart from the period
the capture shows, and the lead tells whether that period will last.

Definitions (per rank, over a set of its decode steps: the steady ones, or those of a regime,
:mod:`.regimes`; the per-step figures are :mod:`.timeline`'s; thresholds are the constants
below):

* ``host_ms_per_step``: the median of the steps' ``host_step_ms`` plus the median of their
  ``host_gap_ms`` (0 when no step has one): the host's own time to issue a step and to get to
  the next, its waits for the GPU left out. Null without CPU annotations and launch calls.
* ``gpu_ms_per_step``: the median over the steps of ``busy_ms`` less the step's exposed
  all-reduce waiting (:func:`.summary.exposed_allreduce`): the GPU's own work per step, compute
  and transfer, waiting for other ranks left out. Where some ranks of the group have no trace,
  waiting cannot be told from transfer and this is an upper bound (``gpu_upper_bound``).
* ``gpu_need_ms_per_step``: the median over the steps of ``window_ms`` less ``idle_host_ms``
  less the exposed all-reduce waiting: what the GPU measurably needs a step, its own work and
  the idle inside its window that is not the host's (the next kernel was launched and the GPU
  still waited: launch latency, dependencies between streams). Where a step's ``idle_host_ms``
  is unknown its idle counts as the host's (the need is then its ``gpu_ms_per_step``). No period
  of the rank can be shorter while the GPU does the same work.
* ``period_ms``: the median period of the steps.
* ``lead_ms``: the median of the steps' ``lead_ms`` (GPU step start less host step start).
  ``lead_slope_ms_per_step``: the Theil-Sen slope of the lead against the step index (the
  median of the slopes between every two steps, robust to a few odd steps);
  ``lead_change_ms``: that slope times the index range: how much the lead grew (positive) or
  shrank (negative) through the capture (in a trace concatenated from several captures, the
  slopes are taken within each capture, and the range is the longest capture's). At least
  :data:`MIN_TREND_STEPS` steps with a lead, else null; over :data:`TREND_MAX_POINTS` evenly
  spaced steps when there are more. ``lead_first_ms`` and ``lead_last_ms``: the lead at the first
  and the last of the steps; ``lead_waited_ms``: the host's waits for its GPU inside the steps
  from the first to the one before the last (the sum of their ``host_blocked_ms``; null where
  none is known). A wait lets the GPU catch up at once, so the lead falls by it in one step while
  the trend, robust to such one-off steps, does not move: the first and last leads can differ by
  far more than ``lead_change_ms`` (issue 30: rank 1 of the H200 pair fell 265.6 ms, 225 of
  them in one launch call that waited, on a trend of 48.2).
* ``steady``: false when ``|lead_change_ms|`` is at least :data:`DRIFT_MIN` periods: host and
  GPU then do not run at one pace, and the periods measured will not last (a shrinking lead
  runs out and the GPU starts waiting for its host; a growing one fills the launch queue).
* ``need_ms_per_step``: the larger of ``host_ms_per_step`` and ``gpu_need_ms_per_step`` (up to
  issue 30 the GPU's side was ``gpu_ms_per_step``, its work alone, so a GPU whose window holds
  idle that is not the host's could be predicted faster than it runs); ``bound`` is ``host`` when
  the host's exceeds the GPU's need by more than :data:`TIE_REL`, or comes within :data:`TIE_REL`
  of it while the host does not run ahead (``lead_ms`` below :data:`AHEAD_REL` periods: the GPU
  waits for it); else ``gpu``. Without a host figure the bound is unknown (null).
* ``gpu_waits``: the rest of the period, what the GPU spends waiting, from the rank's steady
  decomposition (the mean step, :func:`.steps.decomposition`, whose parts add up to its
  period): ``period_ms`` (its mean period), ``for_host_between_steps_ms`` (``host_ms``: the
  period outside the GPU window), ``for_host_in_window_ms`` (the idle inside the window where
  the host had not launched the next kernel: ``idle_in_window_ms`` x ``idle_host_share``; null
  where that share is unknown), ``for_other_ranks_ms`` (exposed all-reduce waiting; null where
  the group is incomplete and waiting cannot be told from transfer) and ``total_ms``, their sum
  (null where a part is). Per step, period less GPU need is exactly these three waits, so the
  mean period is the mean GPU need plus ``total_ms``. Null without a decomposition.

Across ranks (:func:`group`):

* ``limit``: the rank with the largest need; of the ranks within :data:`TIE_REL` of it, the
  one with the smallest lead (its GPU waits for its host), then the lowest rank.
* ``predicted_period_ms``: the period a longer run settles at. Not steady: the limit's need,
  since every rank waits for the slowest at each collective and the leads run out; so it is never
  below any rank's GPU need. Steady: the limit's measured ``period_ms``, or its need where that is
  larger: a steady capture keeps its period, and the GPU's waits (``gpu_waits``) say why that is
  above the need (up to issue 30 a steady capture was predicted at the need alone, below the
  period it measurably kept).
* ``steady``: every rank is steady. ``drifting_rank``: of the ranks that are not, the one whose
  lead moved most.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from statistics import median

import numpy as np

from .steps import exposed_allreduce

MIN_TREND_STEPS = 3
TREND_MAX_POINTS = 1000  # a longer capture's trend is taken over this many evenly spaced steps
DRIFT_MIN = 0.5
TIE_REL = 0.05
AHEAD_REL = 0.5
THRESHOLDS = {"drift_min_periods": DRIFT_MIN, "pace_tie_rel": TIE_REL, "ahead_rel": AHEAD_REL,
              "min_trend_steps": MIN_TREND_STEPS}


def analyze(rows_by_rank: Mapping[int, list[dict]], partial: bool, decomposition: Mapping[int, dict | None]) -> dict:
    """Each rank's pace over its rows (:func:`rank_pace`) and the group's (:func:`group`): the summary's
    ``pace``; ``decomposition``: each rank's mean of the same rows (:func:`.steps.decomposition`,
    computed once by the caller)."""
    per_rank = {r: rank_pace(rows, [exposed_allreduce(s)[1] for s in rows], partial, decomposition.get(r))
                for r, rows in sorted(rows_by_rank.items()) if rows}
    return {**group(per_rank), "ranks": {str(r): p for r, p in per_rank.items()}}


def theil_sen(points: Sequence[tuple[float, float]], groups: Sequence[int] | None = None) -> float | None:
    """The median of the slopes between every two points of distinct x (None with fewer than two);
    with ``groups``, only between points of one group (the steps of one capture); over
    :data:`TREND_MAX_POINTS` evenly spaced points of a longer capture."""
    groups = list(groups) if groups is not None else [0] * len(points)
    if len(points) > TREND_MAX_POINTS:
        pick = np.linspace(0, len(points) - 1, TREND_MAX_POINTS).round().astype(int)
        points, groups = [points[i] for i in pick], [groups[i] for i in pick]
    xy = np.array(points, float).reshape(-1, 2)
    g = np.array(groups)
    i, j = np.triu_indices(len(xy), 1)
    dx = xy[j, 0] - xy[i, 0]
    keep = (dx != 0) & (g[i] == g[j])
    return float(np.median((xy[j, 1] - xy[i, 1])[keep] / dx[keep])) if keep.any() else None


def rank_pace(steps: Sequence[Mapping], exposed_wait: Iterable[float | None], partial: bool = False,
              decomposition: Mapping | None = None) -> dict:
    """One rank's pace over ``steps`` (its step rows), ``exposed_wait`` the exposed all-reduce
    waiting of each (ms), ``decomposition`` the mean of those steps (for ``gpu_waits``). See the
    module docstring."""
    exposed_wait = list(exposed_wait)
    host_step = [s["host_step_ms"] for s in steps if s.get("host_step_ms") is not None]
    gaps = [s["host_gap_ms"] for s in steps if s.get("host_gap_ms") is not None]
    host = _r(median(host_step) + (median(gaps) if gaps else 0.0)) if host_step else None
    gpu_work = [s["busy_ms"] - (w or 0.0) for s, w in zip(steps, exposed_wait, strict=True)
                if s.get("busy_ms") is not None and s.get("activities")]
    gpu = _r(median(gpu_work)) if gpu_work else None
    gpu_need = [s["window_ms"] - (s.get("idle_host_ms") if s.get("idle_host_ms") is not None else s["idle_ms"])
                - (w or 0.0) for s, w in zip(steps, exposed_wait, strict=True)
                if s.get("window_ms") is not None and s.get("idle_ms") is not None and s.get("activities")]
    need_gpu = _r(median(gpu_need)) if gpu_need else None
    periods = [s["period_ms"] for s in steps if s.get("period_ms") is not None]
    period = _r(median(periods)) if periods else None
    with_lead = [s for s in steps if s.get("lead_ms") is not None]
    leads = [(s["index"], s["lead_ms"]) for s in with_lead]
    captures = [s.get("capture", 0) for s in with_lead]
    slope = theil_sen(leads, captures) if len(leads) >= MIN_TREND_STEPS else None
    spans = {}
    for (idx, _), c in zip(leads, captures, strict=True):
        lo, hi = spans.get(c, (idx, idx))
        spans[c] = (min(lo, idx), max(hi, idx))
    change = slope * max(hi - lo for lo, hi in spans.values()) if slope is not None else None
    lead = median(v for _, v in leads) if leads else None
    blocked = [s["host_blocked_ms"] for s in with_lead[:-1] if s.get("host_blocked_ms") is not None]
    steady = not (change is not None and period and abs(change) >= DRIFT_MIN * period)
    need = max(v for v in (host, need_gpu) if v is not None) if host is not None or need_gpu is not None else None
    bound = None
    if host is not None and need_gpu is not None:
        ahead = lead is not None and period is not None and lead >= AHEAD_REL * period
        bound = ("host" if host > need_gpu * (1 + TIE_REL) or (host >= need_gpu * (1 - TIE_REL) and not ahead)
                 else "gpu")
    return {
        "steps": len(steps), "host_ms_per_step": host, "gpu_ms_per_step": gpu, "gpu_need_ms_per_step": need_gpu,
        "gpu_upper_bound": partial, "gpu_waits": gpu_waits(decomposition),
        "period_ms": period, "lead_ms": _r(lead), "lead_first_ms": _r(leads[0][1]) if leads else None,
        "lead_last_ms": _r(leads[-1][1]) if leads else None, "lead_waited_ms": _r(sum(blocked)) if blocked else None,
        "lead_slope_ms_per_step": _r(slope),
        "lead_change_ms": _r(change), "steady": steady, "need_ms_per_step": need, "bound": bound,
    }


def group(per_rank: Mapping[int, Mapping]) -> dict:
    """The limit, the predicted period and whether the capture is steady, over the ranks' paces."""
    live = {r: p for r, p in per_rank.items() if p.get("need_ms_per_step") is not None}
    out = {"limit": None, "bound": None, "predicted_period_ms": None, "steady": None, "drifting_rank": None,
           "thresholds": dict(THRESHOLDS)}
    if not live:
        return out
    top = max(p["need_ms_per_step"] for p in live.values())
    tied = [r for r, p in live.items() if p["need_ms_per_step"] >= top * (1 - TIE_REL)]
    limit = min(tied, key=lambda r: (live[r]["lead_ms"] if live[r]["lead_ms"] is not None else float("inf"), r))
    drifting = [r for r, p in live.items() if not p["steady"]]
    predicted = live[limit]["need_ms_per_step"]
    if not drifting and live[limit]["period_ms"] is not None:
        predicted = max(predicted, live[limit]["period_ms"])
    out.update(limit=limit, bound=live[limit]["bound"], predicted_period_ms=predicted, steady=not drifting,
               drifting_rank=max(drifting, key=lambda r: (abs(live[r]["lead_change_ms"]), -r)) if drifting else None)
    return out


def gpu_waits(d: Mapping | None) -> dict | None:
    """The rest of the period beyond the GPU's need, from a steady decomposition (see the module
    docstring), or None without one."""
    if not d or d.get("period_ms") is None:
        return None
    share, idle = d.get("idle_host_share"), d.get("idle_in_window_ms")
    in_window = idle * share if share is not None and idle is not None else (0.0 if idle == 0 else None)
    parts = {"for_host_between_steps_ms": d.get("host_ms"), "for_host_in_window_ms": in_window,
             "for_other_ranks_ms": d.get("allreduce_wait_ms")}
    total = sum(parts.values()) if all(v is not None for v in parts.values()) else None
    return {"period_ms": d["period_ms"], **{k: _r(v) for k, v in parts.items()}, "total_ms": _r(total)}


def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), 4) + 0.0  # + 0.0: no -0.0
