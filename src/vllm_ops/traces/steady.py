"""Statistics over steps, and the steady state: which decode steps represent the run.

The steady-state rule (documented once, here; thresholds are the constants below):

1. A decode step that is the first step of its capture (of any phase: the step rows'
   ``first_in_capture``, :mod:`.timeline`) is left out when the rank has at least
   :data:`FIRST_STEP_MIN_STEPS` decode steps: the profiler starts while the engine runs,
   ranks start profiling hundreds of milliseconds apart, and the first collective of the
   capture absorbs that gap. In a trace concatenated from several captures (the step rows'
   ``capture``), so is the first step of each capture. Where a prefill (or mixed) step came
   first, the start-up landed in it, and the first decode step is judged as any other.
2. A decode step whose duration (its period; the CPU annotation on a rank without GPU kernels)
   lies further than :data:`OUTLIER_REL` times the rank's median from that median is left out.
   A capture's last step has no period: its window is held against the median window of the
   rank's steps that have both, like against like (a window leaves out the host's time between
   two steps, so against the median period a slow last step could pass as steady, and on a
   host-bound rank a normal one as far too fast).
3. The ranks of a tensor-parallel group run the same steps in lockstep, and collectives are
   matched across them: a step index left out on one rank is left out on every rank (when
   the ranks have the same number of decode steps).

Every step left out is named with its reason, and the summary warns about it. A step rule 2
leaves out whose host time is a stall (:mod:`.stalls`) says so first.

**The steps the steady figures average** (:func:`averaged`): the steady decode steps that have a
period (and, on a rank with GPU kernels, a GPU window). A capture's last step has no period: it is
steady or not by its window (rule 2), but no mean of the page holds it, so the steady-state
table (``steady_stats``), the decomposition, each rank's waiting per steady step and the ledger
average one set of steps and agree. (Up to issue 30 ``steady_stats`` and the waiting per steady
step took the last step in, and differed from the decomposition beside them.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from . import stalls
from .notes import Note, note
from .stalls import step_duration

FIRST_STEP_MIN_STEPS = 3
START_UP = "first profiled step (profiler start-up; ranks start profiling apart)"
OUTLIER_REL = 0.5
RULE = ("left out: each rank's first step when it is a decode step (when it has at least 3; of each capture, in a "
        "trace concatenated from several), and any decode step whose period is further than 50% of the rank's "
        "median from that median (the last step, which has no period: its window against the median window); a "
        "step left out on one rank is left out on all ranks of the group")


def analyze(left: Mapping[int, str], left_by_rank: Mapping[int, Mapping[int, str]]) -> tuple[dict, list[Note]]:
    """The summary's ``steady_state`` (the rule, the steps left out and why: across ranks in lockstep,
    ``left``, else each rank's, ``left_by_rank``), and a note for each step left out."""
    out = {
        "rule": RULE, "outlier_rel": OUTLIER_REL, "first_step_min_steps": FIRST_STEP_MIN_STEPS,
        "left_out": [{"index": i, "reason": why} for i, why in sorted(left.items())] if left else
                    [{"rank": r, "index": i, "reason": why} for r, d in sorted(left_by_rank.items())
                     for i, why in sorted(d.items())],
    }
    return out, [note("left_out", rank=x.get("rank"), index=x["index"], reason=x["reason"]) for x in out["left_out"]]


def stats(values: Iterable[float | None]) -> dict | None:
    """median, p90, mean, min, max and n of the values that are not None (None when none are)."""
    x = np.array([v for v in values if v is not None], float)
    if not len(x):
        return None
    return {"median": _r(np.median(x)), "p90": _r(np.percentile(x, 90)), "mean": _r(x.mean()),
            "min": _r(x.min()), "max": _r(x.max()), "n": len(x)}


def averaged(rows: Sequence[Mapping], measured: bool = True) -> list[Mapping]:
    """The steady decode steps among ``rows`` that the steady figures average (see the module
    docstring); ``measured``: whether the rank's trace holds GPU kernels (a window is then needed)."""
    return [s for s in rows if s.get("phase", "decode") == "decode" and s.get("steady")
            and s.get("period_ms") is not None and (s.get("window_ms") is not None or not measured)]


def left_out(decode_steps: Sequence[Mapping]) -> dict[int, list[str]]:
    """Step index -> reasons, for one rank's decode steps (rules 1 and 2)."""
    out: dict[int, list[str]] = {}
    if len(decode_steps) >= FIRST_STEP_MIN_STEPS:
        for s in first_steps(decode_steps):
            out[s["index"]] = [START_UP]
    stalled = {x["index"]: x for x in stalls.find(decode_steps)}
    windowed = {s["index"] for s in decode_steps if _by_window(s)}
    for idx, (d, median) in outliers(decode_steps).items():
        if idx in stalled:
            x = stalled[idx]
            out.setdefault(idx, []).append(
                f"host stall: {x['host_ms']:.2f} ms outside the GPU window, "
                + (f"{x['ratio']:.0f}x " if x["ratio"] is not None else "far above ")
                + f"the rank's median host time ({x['median_host_ms']:.2f} ms)")
        against = ("the median window", "; the last step has no period") if idx in windowed else ("the median step", "")
        out.setdefault(idx, []).append(
            f"lasts {d:.2f} ms, {d / median:.1f}x {against[0]} ({median:.2f} ms{against[1]}), outside the median "
            f"+/- {int(OUTLIER_REL * 100)}%")
    return out


def first_steps(decode_steps: Sequence[Mapping]) -> list[Mapping]:
    """The decode steps that are the first step of their capture (rule 1: where the profiler's
    start-up lands). Rows without ``first_in_capture`` (summaries of earlier versions, hand-made
    rows) take the first decode step of each capture, as rule 1 did before."""
    if decode_steps and all("first_in_capture" in s for s in decode_steps):
        return [s for s in decode_steps if s["first_in_capture"]]
    out, seen = [], set()
    for s in decode_steps:
        if s.get("capture", 0) not in seen:
            seen.add(s.get("capture", 0))
            out.append(s)
    return out


def _by_window(step: Mapping) -> bool:
    """Whether rule 2 judges ``step`` by its window: a step with a window and no period (a capture's last)."""
    return step.get("period_ms") is None and step.get("window_ms") is not None


def outliers(decode_steps: Sequence[Mapping]) -> dict[int, tuple[float, float]]:
    """Rule 2 alone: step index -> (its duration, the median it is held against), ms: the rank's median
    duration, or for a step judged by its window, the median window of the steps with a period."""
    durations = [step_duration(s) for s in decode_steps]
    known = [d for d in durations if d is not None]
    windows = [s["window_ms"] for s in decode_steps
               if s.get("period_ms") is not None and s.get("window_ms") is not None]
    out: dict[int, tuple[float, float]] = {}
    if len(known) >= FIRST_STEP_MIN_STEPS:
        median = float(np.median(known))
        median_window = float(np.median(windows)) if len(windows) >= FIRST_STEP_MIN_STEPS else median
        for s, d in zip(decode_steps, durations, strict=True):
            m = median_window if _by_window(s) else median
            if d is not None and m > 0 and abs(d - m) > OUTLIER_REL * m:
                out[s["index"]] = (d, m)
    return out


def group_left_out(per_rank: Mapping[int, Sequence[Mapping]]) -> dict[int, str]:
    """Rule 3: ``{step index: reason}`` over the ranks, each reason naming the ranks it holds on."""
    merged: dict[int, list[tuple[int, list[str]]]] = {}
    for rank, steps in sorted(per_rank.items()):
        for idx, why in left_out(steps).items():
            merged.setdefault(idx, []).append((rank, why))
    out = {}
    for idx, hits in sorted(merged.items()):
        first = [r for r, why in hits if why[0] == START_UP]
        parts = [START_UP] if first else []
        parts += [f"rank {r} {w}" for r, why in hits for w in why if w != START_UP]
        out[idx] = "; ".join(parts)
    return out


def _r(v) -> float:
    return round(float(v), 4)
