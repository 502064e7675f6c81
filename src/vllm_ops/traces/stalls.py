"""Host stalls: decode steps whose host time outside the GPU window is far above the rank's usual.

A step's ``host_ms`` (:mod:`.timeline`: its period less its GPU window) holds the scheduling,
sampling and launching the host does between two steps. A step that waits far longer than the
rank's other steps for its host to begin the next one (a garbage collection, a page fault, CPU
contention, a blocked tokenizer) is a *stall*: the time it holds is the host's, not the GPU's,
and no figure of the steady step describes it. The profiler's start-up is told apart by where it
lands (the first step of a capture, :mod:`.steady`), never by being the first decode step; and a
stall on that first step is still a stall: the start-up is left out of the steady figures there
either way, and the stall is named beside it (``first_in_capture``), since the trace cannot say
how much of that step's host time the profiler's start-up holds (across the ranks of a group,
its skew shows as waiting in the step's first collective, inside the GPU window, not outside it).

Definitions (per rank, over its decode steps; thresholds are the constants below):

* ``median_host_ms``: the median ``host_ms`` of the rank's decode steps that have one, left out
  of nothing (a few stalls do not move a median); at least :data:`MIN_STEPS` of them, else no
  step is named a stall.
* ``median_period_ms``: the median ``period_ms`` of the same steps.
* A decode step is a **stall** when its ``host_ms`` is at least :data:`STALL_REL` times
  ``median_host_ms`` and at least :data:`STALL_PERIODS` median periods: the host kept the GPU
  waiting longer than a whole usual step. Steps that are merely slower (a host that launches
  slowly for a while, :mod:`.regimes`) hold less than a period each outside their window, and
  are no stalls. A stall on the first step of its capture has ``first_in_capture`` true.
* ``time_share``: the stall's ``host_ms`` over the rank's decode time (the sum of the durations
  the steady-state rule compares, :func:`step_duration`): how much of the decode time
  the host spent stalled there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median

from .annotations import DECODE
from .notes import Note, note

STALL_REL = 4.0
STALL_PERIODS = 1.0
MIN_STEPS = 3
THRESHOLDS = {"stall_rel": STALL_REL, "stall_periods": STALL_PERIODS, "min_steps": MIN_STEPS}


def step_duration(step: Mapping) -> float | None:
    """The duration the steady-state rule 2 compares (:mod:`.steady`): period, else window, else CPU
    annotation (ms)."""
    for key in ("period_ms", "window_ms", "cpu_ms"):
        if step.get(key) is not None:
            return step[key]
    return None


def analyze(entries: Sequence[Mapping]) -> tuple[dict, list[Note]]:
    """The summary's ``stalls``: every rank's stalls (:func:`find`, each with its ``rank``) over the
    ranks with GPU kernels and decode steps, and the thresholds; a note for each stall."""
    found = [{"rank": e["rank"], **x} for e in entries if e["gpu_time_measured"] and e["decode_steps"]
             for x in find([s for s in e["steps"] if s["phase"] == DECODE])]
    return {"steps": found, "thresholds": dict(THRESHOLDS)}, [note("stall", **x) for x in found]


def find(decode_steps: Sequence[Mapping]) -> list[dict]:
    """``[{index, host_ms, median_host_ms, median_period_ms, ratio, time_share, first_in_capture}]``: the
    stalls among one rank's decode step rows (see the module docstring), in step order."""
    host = [s["host_ms"] for s in decode_steps if s.get("host_ms") is not None]
    if len(host) < MIN_STEPS:
        return []
    med = float(median(host))
    period = float(median(s["period_ms"] for s in decode_steps if s.get("host_ms") is not None))
    total = sum(d for d in (step_duration(s) for s in decode_steps) if d is not None)
    out = []
    for s in decode_steps:
        h = s.get("host_ms")
        if h is None:
            continue
        if h >= STALL_REL * med and h >= STALL_PERIODS * period:
            out.append({"index": s["index"], "host_ms": round(h, 4), "median_host_ms": round(med, 4),
                        "median_period_ms": round(period, 4),
                        "ratio": round(h / med, 2) if med > 0 else None,
                        "time_share": round(h / total, 4) if total > 0 else None,
                        "first_in_capture": bool(s.get("first_in_capture"))})
    return out
