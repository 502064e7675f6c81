"""Regimes: decode steps left out of the steady state that are a way of running, not noise.

The steady-state rule (:mod:`.steady`) keeps the steps near each rank's median. When a capture
runs in two ways (some steps host-bound, the others not), the median belongs to the larger
group and the other group's steps are left out as outliers, even when they hold most of the
decode time. They are then reported as a regime of their own, with its own figures and verdict.

Definitions (thresholds are the constants below):

* Candidates: the decode steps rule 2 of :mod:`.steady` left out (duration beyond the median
  +/- ``OUTLIER_REL``), except the first decode step of a capture (its start-up) and a host
  stall (:mod:`.stalls`: one long wait of the host, named on its own, no way of running), split by
  side: ``slower`` (above the median) or ``faster`` (below). On ranks in lockstep (the same
  decode step count) a step index is a candidate when some rank's step is one, on the side of
  its first such rank; otherwise ranks are taken one by one.
* A side's candidates are a **regime** when there are at least :data:`MIN_STEPS` of them and
  they are at least :data:`MIN_STEP_SHARE` of the decode steps, or hold at least
  :data:`MIN_TIME_SHARE` of the decode time (the sum of the durations rule 2 compares, on the
  rank where that share is largest).
* A regime's ``steps`` (indices), ``count``, ``decode_steps`` (of its rank, or of each rank in
  lockstep), ``side``, ``time_share``, ``period_ms`` (the median duration of its steps) and
  ``verdict``, judged over its steps as the main verdict is over the steady ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import median

from . import stalls, steady

MIN_STEPS = 2
MIN_STEP_SHARE = 0.2
MIN_TIME_SHARE = 0.25
THRESHOLDS = {"min_steps": MIN_STEPS, "min_step_share": MIN_STEP_SHARE, "min_time_share": MIN_TIME_SHARE}


def find(per_rank: Mapping[int, Sequence[Mapping]], lockstep: bool) -> list[dict]:
    """The regimes among the decode steps of each rank (``{rank: decode step rows}``), over the
    group when the ranks run in lockstep, else rank by rank."""
    groups = [(None, dict(per_rank))] if lockstep else [(r, {r: rows}) for r, rows in sorted(per_rank.items())]
    out = []
    for rank, ranks in groups:
        side_of: dict[int, str] = {}
        for rows in ranks.values():
            # a capture's start-up and a host stall are no regime
            apart = {s["index"] for s in steady.first_steps(rows)} | {x["index"] for x in stalls.find(rows)}
            for idx, (d, med) in steady.outliers(rows).items():
                if idx not in apart:
                    side_of.setdefault(idx, "slower" if d > med else "faster")
        for side in ("slower", "faster"):
            idx = sorted(i for i, s in side_of.items() if s == side)
            if not idx:
                continue
            n = max(len(rows) for rows in ranks.values())
            share = max(_time_share(rows, set(idx)) for rows in ranks.values())
            if len(idx) >= MIN_STEPS and (len(idx) / n >= MIN_STEP_SHARE or share >= MIN_TIME_SHARE):
                durations = [steady.step_duration(s) for rows in ranks.values() for s in rows if s["index"] in idx]
                durations = [d for d in durations if d is not None]
                reg = {"steps": idx, "count": len(idx), "decode_steps": n, "side": side,
                       "time_share": round(share, 4), "period_ms": round(median(durations), 4) if durations else None,
                       "thresholds": dict(THRESHOLDS)}
                if rank is not None:
                    reg["rank"] = rank
                out.append(reg)
    return out


def _time_share(rows: Sequence[Mapping], idx: set[int]) -> float:
    durations = [(s["index"], steady.step_duration(s)) for s in rows]
    total = sum(d for _, d in durations if d is not None)
    return sum(d for i, d in durations if d is not None and i in idx) / total if total > 0 else 0.0
