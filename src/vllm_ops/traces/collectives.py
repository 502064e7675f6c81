"""All-reduce across ranks: match the calls, split each into transfer and waiting, name the straggler.

Definitions:

* **Which calls a group's figures cover** (``over``): the calls of the steady decode steps
  (``steady decode steps``; in the first rank's step indices); where the caller gives no steady
  steps, or none of the group's calls falls in one, the calls of the decode steps (``decode
  steps``); only where no call falls in a decode step, every call (``every step``). A prefill's
  all-reduces (larger messages, more of them) are thus never counted as a decode step's.
  ``calls_decode`` and ``transfer_us_total_decode``: the matched calls in decode steps, and their
  transfer summed (every matched call where the caller gives no decode steps).
* **Matching.** Calls are grouped by process group (NCCL's ``Process Group Name`` kernel
  argument; calls without one, such as vLLM's custom all-reduce, form one unnamed group)
  and matched by call order: the k-th call of a group on every rank is one collective.
* ``transfer_us`` of a collective: its shortest duration over the ranks. Every rank leaves
  the collective at about the same time, so the rank that arrived last waited least, and
  its duration is the transfer (TraceLens' min-over-ranks latency).
* ``wait_us`` of a rank in a collective: its duration minus the transfer: time it spent
  in the kernel waiting for the others to arrive.
* ``last_arriver``: the rank with the shortest duration (ties: the lowest rank). Arrival
  order from durations needs no clock agreement between ranks (hosts).
* ``skew_us``: longest minus shortest duration, the time the first arriver waited for
  the last.
* **One rank of a group** (``told_apart`` false: only one rank's trace holds the group's calls):
  a call cannot be split, so its ``transfer_us`` is that rank's own kernel time (waiting
  included) and its waiting, the last arriver, the skew and the bandwidths are null, never a
  0 or a 100% that one rank alone would give.
* ``message_bytes``: element count x element size (NCCL's ``In msg nelems`` and
  ``dtype``); null where the trace does not record them.
* Bandwidths as nccl-tests computes them for all-reduce: ``algbw = bytes / transfer``,
  ``busbw = algbw x 2(n-1)/n`` with n the group's size (from ``distributedInfo.pg_config``,
  else the ranks with calls in the group); GB/s are 1e9 bytes per second. A group's
  ``algbw_gbps``/``busbw_gbps`` are the medians over its (steady) calls of each call's figure.
* The **straggler** is the rank that arrives last at the largest share of the collectives,
  named when that share is at least :data:`STRAGGLER_MIN_SHARE`.
* **Bounds, when ranks of the group are missing** (:func:`bounds`): the all-reduce time per
  step of one rank, as an interval, because without the other ranks' durations its transfer
  cannot be told from its waiting. ``low_ms_per_step``: each call counted at the rank's own
  shortest call of its message size (element count and dtype; calls without them count as one
  size) over the whole capture, summed per step: the time a call of that size takes when the
  rank waited for no one (it arrived last at that call), a lower bound of the transfer when
  the rank arrived last at one call of each size at least, as some rank always does.
  ``high_ms_per_step``: the rank's all-reduce kernel time per step, waiting included. Both are
  means over the given steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from statistics import fmean
from typing import TYPE_CHECKING

import numpy as np

from ..allreduce import floor
from . import steady
from .notes import Note, note

if TYPE_CHECKING:
    from .run import Run

STRAGGLER_MIN_SHARE = 0.6

DTYPE_BYTES = {
    "BFloat16": 2, "Half": 2, "Float": 4, "Double": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "Int": 4, "Long": 8, "Short": 2, "Char": 1, "Byte": 1,
    "Bool": 1, "bfloat16": 2, "float16": 2, "float32": 4, "float": 4, "half": 2, "int32": 4, "int64": 8,
}


def analyze(run: Run, measured_floor: Mapping | None) -> tuple[dict, dict, list[Note]]:
    """The summary's ``collectives`` over the run's measured ranks (:func:`match` of every step's
    calls, the group and rank figures over the steady decode steps), each group set beside the host's
    measured floor where one was given (:func:`vllm_ops.allreduce.floor.annotate`); the transfer and
    waiting per step of each rank (µs, ``{rank: {step: (transfer, wait)}}``); and the notes."""
    live = run.measured
    calls = {r["rank"]: r["set"]["calls"] for r in live if r["set"]["calls"] is not None}
    groups: dict = {}
    for r in live:
        groups.update(r["process_groups"])
    coll = match(calls, groups, run.steady, run.decode_steps())
    per_step, notes = coll.pop("per_step"), coll.pop("notes")
    floor.annotate(coll["groups"], measured_floor)
    if measured_floor is not None:
        notes += [note("floor_not_used", source=measured_floor["source"], group=g["group"], why=g["floor_note"])
                  for g in coll["groups"] if g["floor_note"]]
    return coll, per_step, notes


def steady_waits(coll: dict, entries: Sequence[Mapping]) -> None:
    """Each rank's ``wait_ms_per_step`` in ``coll['by_rank']``: its mean waiting over the steps the
    steady figures average (:func:`.steady.averaged`); null where a step's waiting is unknown."""
    for e in entries:
        if e["steady_steps"] is not None and e["decode_steps"]:
            wait = [s.get("allreduce_wait_ms") for s in steady.averaged(e["steps"], e["gpu_time_measured"])]
            if str(e["rank"]) in coll["by_rank"] and wait:
                coll["by_rank"][str(e["rank"])]["wait_ms_per_step"] = None if None in wait else round(fmean(wait), 4)


def match(calls_by_rank: Mapping[int, Mapping], group_sizes: Mapping[str, int],
          steady: set[int] | Mapping[int, set[int]] | None,
          decode: Mapping[int, set[int]] | None = None) -> dict:
    """Match the all-reduce calls of every rank (``timeline.allreduce_calls`` dicts, by rank).

    Returns ``{groups: [...], by_rank: {rank: {...}}, straggler, per_step: {rank: {step:
    (transfer_us, wait_us)}}, notes: [...]}`` (:mod:`.notes`: a group whose calls do not match);
    ``steady`` (step indices) restricts the group and rank
    figures to those steps' collectives, as one set (ranks in lockstep) or per rank; ``decode``
    (per rank, step indices) names the decode steps (None: every step is one). See ``over`` in the
    module docstring.
    """
    ranks = sorted(calls_by_rank)
    out = {"groups": [], "by_rank": {}, "straggler": None, "per_step": {r: {} for r in ranks}, "notes": []}
    notes = out["notes"]
    if not ranks or not any(len(calls_by_rank[r]["dur"]) for r in ranks):
        return out
    keys = sorted({g if g is not None else "" for r in ranks for g in calls_by_rank[r]["group"]})
    last_total = dict.fromkeys(ranks, 0)
    wait_total = dict.fromkeys(ranks, 0.0)
    matched_total = 0
    unknown_wait: set[int] = set()
    group_of = {r: np.array(["" if g is None else g for g in calls_by_rank[r]["group"]], dtype=object)
                for r in ranks}
    name_ids: dict[str, int] = {}
    name_of = {r: np.array([name_ids.setdefault(n, len(name_ids)) for n in calls_by_rank[r]["name"]], np.int64)
               for r in ranks}
    for key in keys:
        per_rank = {r: np.flatnonzero(group_of[r] == key) for r in ranks}
        present = [r for r in ranks if len(per_rank[r])]
        counts = {r: len(per_rank[r]) for r in present}
        n_match = min(counts.values()) if counts else 0
        if len(set(counts.values())) > 1:
            notes.append(note("call_counts_differ", group=key, counts=counts, matched=n_match))
        if n_match == 0:
            continue
        alone = len(present) < 2
        if alone:
            notes.append(note("one_rank_group", group=key, rank=present[0]))
        dur = np.array([np.asarray(calls_by_rank[r]["dur"])[per_rank[r][:n_match]] for r in present])
        step = np.array([np.asarray(calls_by_rank[r]["step"])[per_rank[r][:n_match]] for r in present])
        names = np.array([name_of[r][per_rank[r][:n_match]] for r in present])
        differ = int(np.sum(np.any(names != names[0], axis=0)))
        if differ:
            notes.append(note("kernels_differ", group=key, n=differ, matched=n_match))
        steps_differ = int(np.sum(np.any(step != step[0], axis=0)))
        if steps_differ:
            notes.append(note("steps_differ", group=key, n=steps_differ, matched=n_match))
        transfer = dur.min(axis=0)
        wait = dur - transfer
        last = np.argmin(dur, axis=0)
        for j, r in enumerate(present):
            ps = out["per_step"][r]
            steps_j, pos = np.unique(step[j], return_inverse=True)
            t_sum = np.bincount(pos, weights=transfer)
            w_sum = np.bincount(pos, weights=wait[j])
            for s_, t_, w_ in zip(steps_j.tolist(), t_sum.tolist(), w_sum.tolist(), strict=True):
                a, b = ps.get(s_, (0.0, 0.0))
                ps[s_] = (a + t_, None if alone or b is None else b + w_)
        ref = present[0]
        steady_ref = steady.get(ref) if isinstance(steady, Mapping) else steady
        in_decode = (np.isin(step[0], list(decode.get(ref) or ())) if decode is not None
                     else np.ones(n_match, bool))
        keep, over = np.zeros(n_match, bool), "steady decode steps"
        if steady_ref is not None:
            keep = np.isin(step[0], list(steady_ref)) & in_decode
        if not keep.any():
            keep, over = in_decode.copy(), "decode steps"
        if not keep.any():
            keep, over = np.ones(n_match, bool), "every step"
        first = calls_by_rank[present[0]]
        nelems = [first["nelems"][i] for i in per_rank[present[0]][:n_match].tolist()]
        dtypes = [first["dtype"][i] for i in per_rank[present[0]][:n_match].tolist()]
        size = group_sizes.get(key) or len(present)
        nbytes = np.array([(e * DTYPE_BYTES[d]) if e is not None and d in DTYPE_BYTES else np.nan
                           for e, d in zip(nelems, dtypes, strict=True)])
        t_k, b_k = transfer[keep], nbytes[keep]
        skew = (dur.max(axis=0) - transfer)[keep]
        last_k = last[keep]
        with np.errstate(divide="ignore", invalid="ignore"):
            algbw = b_k / (t_k * 1e-6) / 1e9
        busbw = algbw * (2.0 * (size - 1) / size) if size > 1 else algbw * np.nan
        steps_in = len(np.unique(step[0][keep]))
        group = {
            "group": key or None,
            "ranks": present,
            "size": size,
            "calls": int(keep.sum()),
            "calls_all_steps": n_match,
            "over": over,
            "calls_decode": int(in_decode.sum()),
            "transfer_us_total_decode": float(transfer[in_decode].sum()),
            "calls_per_step": round(float(keep.sum()) / steps_in, 3) if steps_in else None,
            "dtype": _mode(dtypes),
            "message_bytes": _stats(b_k),
            "transfer_us": _stats(t_k),
            "transfer_us_mean": _r(float(np.mean(t_k))),
            "transfer_ms_per_step": _r(float(t_k.sum()) / steps_in / 1000.0, 4) if steps_in else None,
            "transfer_us_total_all_steps": float(transfer.sum()),
            "algbw_gbps": None if alone else _r(_nanmedian(algbw), 3),
            "busbw_gbps": None if alone else _r(_nanmedian(busbw), 3),
            "skew_us": None if alone else _stats(skew),
            "last_arriver_share": {} if alone else {str(r): round(float(np.mean(last_k == j)), 4)
                                                    for j, r in enumerate(present)},
            "told_apart": not alone,
        }
        out["groups"].append(group)
        if alone:  # nothing to say of arrivals or waiting
            unknown_wait.update(present)
            continue
        matched_total += int(keep.sum())
        for j, r in enumerate(present):
            last_total[r] += int(np.sum(last_k == j))
            wait_total[r] += float(wait[j][keep].sum())
    for r in ranks:
        out["by_rank"][str(r)] = {
            "last_arrival_share": round(last_total[r] / matched_total, 4) if matched_total else None,
            "wait_ms_total": None if r in unknown_wait else _r(wait_total[r] / 1000.0, 4),
            "wait_ms_per_step": None,  # the caller's, from its steady steps (the per_step sums are here)
        }
    if matched_total and len(ranks) > 1:
        top = max(ranks, key=lambda r: (last_total[r], -r))
        share = last_total[top] / matched_total
        out["straggler"] = {"rank": top, "last_arrival_share": round(share, 4), "named": share >= STRAGGLER_MIN_SHARE,
                            "threshold": STRAGGLER_MIN_SHARE}
    return out


def bounds(calls: Mapping, steps: Sequence[int]) -> dict | None:
    """One rank's all-reduce time per step as an interval (ms) over ``steps`` (see the module
    docstring); ``calls`` is the rank's ``timeline.allreduce_calls`` dict. None without calls."""
    dur = np.asarray(calls["dur"], float)
    if not len(dur) or not len(steps):
        return None
    size = [(e, d) for e, d in zip(calls["nelems"], calls["dtype"], strict=True)]
    shortest: dict = {}
    for k, d in zip(size, dur.tolist(), strict=True):
        shortest[k] = min(shortest.get(k, d), d)
    step = np.asarray(calls["step"])
    low = np.array([shortest[k] for k in size])
    inside = np.isin(step, list(steps))
    n = len(steps)
    return {"low_ms_per_step": _r(float(low[inside].sum()) / n / 1000.0, 4),
            "high_ms_per_step": _r(float(dur[inside].sum()) / n / 1000.0, 4),
            "sizes": len(shortest), "sizes_known": all(e is not None and d is not None for e, d in shortest),
            "steps": n}


def _mode(values: Sequence) -> object:
    vals = [v for v in values if v is not None]
    return max(set(vals), key=vals.count) if vals else None


def _nanmedian(x: np.ndarray) -> float | None:
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else None


def _stats(x: np.ndarray) -> dict | None:
    x = np.asarray(x, float)
    x = x[~np.isnan(x)]
    if not len(x):
        return None
    return {"median": _r(float(np.median(x))), "p90": _r(float(np.percentile(x, 90))), "mean": _r(float(x.mean())),
            "min": _r(float(x.min())), "max": _r(float(x.max()))}


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None or v != v else round(v, digits)


def partial_bounds(live: Sequence[Mapping], ranks: Sequence[Mapping], steady_rows: Mapping[int, list[dict]]) -> dict:
    """Where ranks of the group are missing: each present rank's all-reduce interval (:func:`bounds`
    over its steady decode steps, ``live``: the entries with GPU kernels and decode steps), with its
    shares of the rank's mean steady period (``low_share``, ``high_share``)."""
    out = {}
    by_rank = {r["rank"]: r for r in ranks}
    for e in live:
        calls = by_rank[e["rank"]]["set"]["calls"]
        rows = steady.averaged(steady_rows.get(e["rank"]) or [])
        b = bounds(calls, [s["index"] for s in rows]) if calls is not None else None
        if b is None:
            continue
        periods = [s["period_ms"] for s in rows if s.get("period_ms") is not None]
        period = fmean(periods) if periods else None
        b["low_share"] = round(b["low_ms_per_step"] / period, 4) if period else None
        b["high_share"] = round(b["high_ms_per_step"] / period, 4) if period else None
        out[str(e["rank"])] = b
    return out
