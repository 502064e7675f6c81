"""Do the rank files belong to one run: the check before any figure is set across ranks.

A summary reads one file per rank of one tensor-parallel group, captured together. Files of
different runs (rank 0 of one capture beside rank 1 of another) would still be matched call by
call and given a confident verdict, so they are refused instead, naming the files.

Each rank is compared with the first (the lowest rank); a difference below is *evidence* that the
two are of different runs, and any evidence refuses the summary (thresholds are the constants
below). Each figure is compared only where both ranks have it:

* ``time``: the ranks' time ranges (:func:`.summary.summarize_rank`'s ``time_range_us``: first to
  last GPU activity or step annotation), in wall-clock time where both traces carry
  ``baseTimeNanoseconds`` (``ts`` + base / 1000), else in their own ``ts`` where neither does;
  they lie more than :data:`RUN_GAP_MAX_S` apart. (The ranks of one capture are profiled
  together, so their ranges overlap: vLLM starts and stops every worker's profiler by one request,
  up to a second apart; two captures on one host lie seconds to minutes apart, measured 8.7 s for
  two captures run back to back on an H200, tests/data/traces/known_h200. The margin leaves room for
  the clocks of hosts kept by NTP, within milliseconds.)
* ``world_size``: ``distributedInfo.world_size`` differs; ``nccl_version``: its NCCL version
  differs (one group runs one NCCL).
* ``allreduce_calls``: the median all-reduce calls a decode step differs (every rank of a group
  takes part in every collective of a step).
* ``allreduce_size``: the most common all-reduce message (element count and dtype) of the decode
  steps differs.
* ``period``: the median decode period of one is more than :data:`PERIOD_RATIO_MAX` times the
  other's (the ranks of a group wait for each other at every collective, so their periods agree).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from statistics import median

from .errors import TraceInputError

RUN_GAP_MAX_S = 2.0
PERIOD_RATIO_MAX = 1.5
THRESHOLDS = {"run_gap_max_s": RUN_GAP_MAX_S, "period_ratio_max": PERIOD_RATIO_MAX}


def evidence(a: Mapping, b: Mapping) -> dict[str, str]:
    """``{check: what differs}`` between two ranks' dicts (the reader's, with their decode step
    rows ``decode`` and chosen step set ``set``); empty when nothing says they are of two runs."""
    out: dict[str, str] = {}
    ra, rb = _range_s(a, b), _range_s(b, a)
    if ra is not None and rb is not None:
        gap = max(ra[0], rb[0]) - min(ra[1], rb[1])
        if gap > RUN_GAP_MAX_S:
            out["time"] = (f"time ranges {gap:.1f} s apart (more than {RUN_GAP_MAX_S:g} s; "
                           f"rank {a['rank']} {_span(ra)}, rank {b['rank']} {_span(rb)})")
    for key, words in (("world_size", "world size"), ("nccl_version", "NCCL version")):
        if a.get(key) is not None and b.get(key) is not None and a[key] != b[key]:
            out[key] = f"{words} {a[key]} vs {b[key]}"
    ca, cb = _calls_per_step(a), _calls_per_step(b)
    if ca is not None and cb is not None and ca != cb:
        out["allreduce_calls"] = f"all-reduce calls a decode step {_n(ca)} vs {_n(cb)}"
    sa, sb = _size(a), _size(b)
    if sa is not None and sb is not None and sa != sb:
        out["allreduce_size"] = f"all-reduce messages {_words(sa)} vs {_words(sb)}"
    pa, pb = _period(a), _period(b)
    if pa and pb and max(pa, pb) / min(pa, pb) > PERIOD_RATIO_MAX:
        out["period"] = (f"median decode periods {pa:.2f} and {pb:.2f} ms (more than {PERIOD_RATIO_MAX}x apart: "
                         "impossible in one tensor-parallel group)")
    return out


def check(ranks: Sequence[Mapping]) -> None:
    """Raise :class:`TraceInputError` naming the files that do not belong with the first rank's."""
    if len(ranks) < 2:
        return
    ref = ranks[0]
    bad = [(r, ev) for r in ranks[1:] if (ev := evidence(ref, r))]
    if not bad:
        return
    files = [ref["file"]] + [r["file"] for r, _ in bad]
    why = "; ".join(f"rank {r['rank']} ({os.path.basename(r['file'])}) against rank {ref['rank']}: "
                    + ", ".join(ev.values()) for r, ev in bad)
    raise TraceInputError(f"{', '.join(files)}: the rank files do not belong to one run ({why}); summarize "
                          "the rank files of one capture together (one directory per capture)")


def _range_s(r: Mapping, other: Mapping) -> tuple[float, float] | None:
    """The rank's time range in seconds, on a clock the other rank shares (see the docstring)."""
    rng = r.get("time_range_us")
    if not rng:
        return None
    base, other_base = r.get("base_time_ns"), other.get("base_time_ns")
    if (base is None) != (other_base is None):
        return None
    offset = base / 1000.0 if base is not None else 0.0
    return (rng[0] + offset) / 1e6, (rng[1] + offset) / 1e6


def _span(rng: tuple[float, float]) -> str:
    return f"{rng[0]:.1f}-{rng[1]:.1f} s"


def _decode(r: Mapping) -> list[Mapping]:
    return list(r.get("decode") or []) if r.get("gpu_kernels") else []


def _calls_per_step(r: Mapping) -> float | None:
    counts = [s["allreduce_calls"] for s in _decode(r)]
    return float(median(counts)) if counts and any(counts) else None


def _size(r: Mapping) -> tuple | None:
    calls = (r.get("set") or {}).get("calls")
    idx = {s["index"] for s in _decode(r)}
    if not calls or not idx:
        return None
    sizes = Counter((e, d) for st, e, d in zip(calls["step"].tolist(), calls["nelems"], calls["dtype"], strict=True)
                    if st in idx and e is not None and d is not None)
    return sizes.most_common(1)[0][0] if sizes else None


def _period(r: Mapping) -> float | None:
    periods = [s["period_ms"] for s in _decode(r) if s.get("period_ms") is not None]
    return float(median(periods)) if periods else None


def _n(v: float) -> str:
    return f"{v:g}"


def _words(size: tuple) -> str:
    return f"of {size[0]} {size[1]} elements"
