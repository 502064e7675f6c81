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

from . import graphs, intensity, pace, stalls, steady, verdict
from .annotations import DECODE
from .notes import Note, note
from .steps import decomposition

MIN_STEPS = 2
MIN_STEP_SHARE = 0.2
MIN_TIME_SHARE = 0.25
THRESHOLDS = {"min_steps": MIN_STEPS, "min_step_share": MIN_STEP_SHARE, "min_time_share": MIN_TIME_SHARE}


def analyze(live: Sequence[Mapping], lockstep: bool, launches_seen: Mapping[int, bool],
            steady_rows: Mapping[int, list[dict]], grounds: Mapping) -> tuple[list[dict], list[Note]]:
    """The summary's ``regimes`` (:func:`find` over the decode steps of ``live``, the entries with GPU
    kernels and decode steps), each with its ``graphs`` (:func:`.graphs.contrast` with the steady steps,
    ``launches_seen``: per rank, whether its trace has launch calls) and its ``verdict``, judged as the
    main one on the same ``grounds`` (:func:`.verdict.judge`'s ``straggler``, ``context``, ``refused``,
    ``floor_ratio``, ``coverage``, ``withheld``, ``fabric``); and a note for each."""
    found = find({e["rank"]: [s for s in e["steps"] if s["phase"] == DECODE] for e in live}, lockstep)
    device_of = {e["rank"]: e["device"] for e in live}
    notes = []
    for reg in found:
        idx = set(reg["steps"])
        rows = {e["rank"]: [s for s in e["steps"] if s["index"] in idx and s["phase"] == DECODE]
                for e in live if reg.get("rank", e["rank"]) == e["rank"]}
        reg_decomp = {k: decomposition(v) for k, v in rows.items()}
        how = [graphs.contrast(v, steady_rows.get(k) or [], launches_seen.get(k, False)) for k, v in rows.items()]
        reg["graphs"] = how[0] if how and all(h["cause"] == how[0]["cause"] for h in how) else (
            {"cause": None, "regime": None, "steady": None, "batch_sizes": []})
        eager = reg["graphs"]["cause"] == "eager"
        ctx = dict(grounds["context"])
        if eager:  # the advice for steps that ran outside the graphs
            ctx.update(cuda_graphs=False, graphs_elsewhere=True, eager_batch_sizes=reg["graphs"]["batch_sizes"])
        cover = grounds["coverage"]
        reg["verdict"] = verdict.judge({str(k): d for k, d in reg_decomp.items() if d}, grounds["straggler"], ctx,
                                       grounds["refused"], floor_ratio=grounds["floor_ratio"],
                                       pace=pace.analyze(rows, not cover["complete"], reg_decomp), coverage=cover,
                                       withheld=grounds["withheld"],
                                       intensity={str(k): intensity.gemm_bound(v, device_of.get(k))
                                                  for k, v in rows.items()},
                                       fabric=grounds["fabric"])
        notes.append(note("regime", count=reg["count"], decode_steps=reg["decode_steps"],
                          time_share=reg["time_share"], side=reg["side"], eager=eager, verdict=reg["verdict"]))
    return found, notes


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
