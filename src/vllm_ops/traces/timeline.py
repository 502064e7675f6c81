"""One rank's steps on its GPU timeline: which activities belong to which step, and what
each step's time is made of. Plain numpy over the arrays the reader builds.

Definitions (one per figure; the CLI, the filters, the report and the history use these):

* **Attribution.** With GPU step annotations (``gpu_user_annotation``), an activity belongs
  to the step whose span holds its start (``start <= ts < end``; of overlapping spans, the
  one that started last). Without them (ROCm; CUDA set-ups that write no GPU projection),
  an activity belongs to the step whose CPU annotation (``user_annotation``) holds the host
  call that launched it, found by the activity's ``correlation`` (a CUDA graph launch
  brings every kernel that carries its correlation). ``steps_from`` says which.
* ``cpu_ms``: the step's CPU annotation (the GPU span's CPU twin, paired by ``External
  id``, else by order); null without one. ``span_ms``: the annotation that defines the step
  (GPU span, or the CPU one where there is no GPU span).
* ``window_ms``: first start to last end of the step's GPU activities.
* ``busy_ms``: the length of the union of those activities' intervals (overlapping streams
  count once; a kernel-time sum would count them twice). ``kernel_ms`` is that sum.
* ``idle_ms`` = ``window_ms`` - ``busy_ms``: GPU idle inside the window. ``idle_host_ms``:
  the idle gaps before an activity whose host launch call (found by its correlation)
  started only after the GPU had run dry, so the GPU waited for the host: HTA's "host
  wait" (its idle-time breakdown), here over the union of the streams and per step.
* A step *starts* when its host side has begun (CPU annotation start) and the GPU has
  finished the previous step (its window end): ``start = max(cpu start, previous window
  end)``, or the window start without a CPU annotation. So a host stall before a step's
  first kernel lands in that step, and a host that runs ahead of its GPU does not shorten
  the GPU's steps.
* ``period_ms``: from this step's start to the next decode step's start on the same rank
  (null for the last): what a client sees as the inter-token time of that step.
  ``host_ms`` = ``period_ms`` - ``window_ms``: the period's time outside the GPU window
  (scheduling, sampling, launches before the first kernel and after the last).
* ``busy_ms_by_category``: ``busy_ms`` split so that the parts add up exactly: each
  instant of busy time goes to the first category, in :func:`busy_priority` order (compute
  categories in the classifier's order, then other collectives, then all-reduce), that
  has an activity running then. So the all-reduce part is *exposed* all-reduce: the time
  when nothing but all-reduce runs on the GPU. ``kernel_ms_by_category`` is the plain
  kernel-time sum per category (overlaps counted twice, all-reduce waiting included).
* ``allreduce_kernel_ms``: the sum of the step's all-reduce kernel durations, waiting
  included (see :mod:`.collectives` for transfer and wait).
* ``graph_launches``: CUDA/HIP graph launches made inside the step's CPU annotation (or,
  without one, whose correlation the step's activities carry).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .annotations import DECODE
from .categories import ALLREDUCE, Classifier
from .reader import Span, TraceData

COMMUNICATION = ("collective", ALLREDUCE)


def busy_priority(classifier: Classifier) -> list[str]:
    """The order in which overlapping busy time is given to categories: compute first,
    communication last (so the all-reduce share is what compute did not hide)."""
    cats = classifier.categories
    return [c for c in cats if c not in COMMUNICATION] + [c for c in COMMUNICATION if c in cats]


@dataclass
class StepRows:
    """The steps of one rank, one entry per step in time order (numpy arrays, µs)."""

    spans: list[Span]
    steps_from: str
    cpu: list[Span | None]
    act_step: np.ndarray  # per activity row: step index, -1 outside every step
    launch_ts: np.ndarray  # per activity row: launch time on the host, nan where unknown


def name_categories(data: TraceData, classifier: Classifier) -> list[str]:
    """The category of each activity name id (``data.names``)."""
    return [classifier.classify(name, cat) for name, cat in zip(data.names, data.name_cats, strict=True)]


def launch_times(data: TraceData) -> np.ndarray:
    """The host launch time of each activity (nan where no launch call carries its
    correlation); of several calls with one correlation, the earliest (the runtime call
    around a driver call)."""
    acts, launches = data.acts, data.launches
    out = np.full(len(acts), np.nan)
    if not len(acts) or not len(launches):
        return out
    order = np.lexsort((launches["ts"], launches["corr"]))
    corr, ts = launches["corr"][order], launches["ts"][order]
    first = np.ones(len(corr), bool)
    first[1:] = corr[1:] != corr[:-1]
    corr, ts = corr[first], ts[first]
    idx = np.searchsorted(corr, acts["corr"])
    idx[idx >= len(corr)] = len(corr) - 1
    hit = (corr[idx] == acts["corr"]) & (acts["corr"] >= 0)
    out[hit] = ts[idx[hit]]
    return out


def _in_spans(times: np.ndarray, spans: list[Span]) -> np.ndarray:
    """Index into ``spans`` (sorted by start) of the span holding each time, -1 for none; of
    nested or overlapping spans, the one that started last among those still open then."""
    if not spans or not len(times):
        return np.full(len(times), -1, np.int64)
    starts = np.array([s.ts for s in spans])
    ends = starts + np.array([s.dur for s in spans])
    j = np.searchsorted(starts, times, side="right") - 1
    valid = (j >= 0) & ~np.isnan(times)
    jj = np.where(valid, j, 0)
    inside = valid & (times < ends[jj])
    out = np.where(inside, j, -1)
    # The latest span before the time has ended, but an enclosing one may still be open:
    # walk back (only where some earlier span ends later than the time).
    reach = np.maximum.accumulate(ends)
    for i in np.flatnonzero(valid & ~inside & (times < reach[jj])):
        t, k = times[i], j[i] - 1
        while k >= 0 and not (starts[k] <= t < ends[k]):
            k -= 1
        out[i] = k
    return out


def pick_steps(data: TraceData, spans_gpu: list[Span], spans_cpu: list[Span], launch_ts: np.ndarray) -> StepRows:
    """Attribute the activities to steps (GPU spans when there are any, else CPU spans by
    correlation) and pair each step with its CPU annotation."""
    if spans_gpu:
        spans = sorted(spans_gpu, key=lambda s: s.ts)
        act_step = _in_spans(data.acts["ts"], spans)
        by_ext = {s.ext: s for s in spans_cpu if s.ext >= 0}
        cpu_sorted = sorted(spans_cpu, key=lambda s: s.ts)
        if all(s.ext in by_ext for s in spans):
            cpu = [by_ext[s.ext] for s in spans]
        elif len(cpu_sorted) == len(spans):
            cpu = cpu_sorted
        else:
            cpu = [None] * len(spans)
        return StepRows(spans, "gpu_user_annotation", cpu, act_step, launch_ts)
    spans = sorted(spans_cpu, key=lambda s: s.ts)
    return StepRows(spans, "user_annotation", list(spans), _in_spans(launch_ts, spans), launch_ts)


def _group_union(s: np.ndarray, e: np.ndarray, g: np.ndarray, n: int, base: np.ndarray):
    """Union length of intervals per group, and the gaps between the union's blocks.

    Arrays are sorted by (group, start); ``base`` is each group's earliest start. Returns
    ``(union per group, gap_group, gap_start, gap_end, first row of the block after the gap)``.
    """
    if not len(s):
        z = np.zeros(0)
        return np.zeros(n), z.astype(np.int64), z, z, z.astype(np.int64)
    rel_s, rel_e = s - base[g], e - base[g]
    width = float(np.max(rel_e)) + 1.0
    ks, ke = g * width + rel_s, g * width + rel_e
    cm = np.maximum.accumulate(ke)
    new = np.ones(len(s), bool)
    new[1:] = ks[1:] > cm[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    lengths = cm[last] - ks[first]
    union = np.bincount(g[first], weights=lengths, minlength=n)
    # gaps: between consecutive blocks of the same group
    same = g[first[1:]] == g[first[:-1]]
    gap_rows = first[1:][same]
    prev_end = cm[last[:-1]][same] - g[first[1:]][same] * width + base[g[gap_rows]]
    return union, g[gap_rows], prev_end, s[gap_rows], gap_rows


_BATCH_ROWS = 1 << 16


def _batches(g: np.ndarray, limit: int):
    """(lo, hi) row ranges of ``g`` (sorted) that hold whole groups and, where a group allows,
    at most ``limit`` rows."""
    if not len(g):
        return
    bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1], True])  # group starts, then the end
    lo = 0
    while lo < len(g):
        j = np.searchsorted(bounds, lo + limit, side="right") - 1
        hi = int(bounds[j]) if bounds[j] > lo else int(bounds[np.searchsorted(bounds, lo, side="right")])
        yield lo, hi
        lo = hi


def step_table(data: TraceData, classifier: Classifier, rows: StepRows) -> list[dict]:
    """One dict per step (see the module docstring), all times in ms; the cross-rank
    all-reduce fields are left for :mod:`.collectives` to fill in."""
    spans = rows.spans
    n = len(spans)
    if not n:
        return []
    acts = data.acts
    cats = name_categories(data, classifier)
    order_cats = busy_priority(classifier)
    cat_index = {c: i for i, c in enumerate(order_cats)}
    name_cat = np.array([cat_index[c] for c in cats], np.int16) if cats else np.zeros(0, np.int16)
    sel = np.flatnonzero(rows.act_step >= 0).astype(np.int32)
    g = rows.act_step[sel].astype(np.int32)
    ts, dur = acts["ts"][sel], acts["dur"][sel]
    order = np.lexsort((ts, g))
    sel, g, ts, dur = sel[order], g[order], ts[order], dur[order]
    end = ts + dur
    acat = name_cat[acts["nid"][sel]] if len(sel) else np.zeros(0, np.int16)
    counts = np.bincount(g, minlength=n)
    has = counts > 0
    wstart = np.full(n, np.nan)
    wend = np.full(n, np.nan)
    if len(sel):
        bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        wstart[g[bounds]] = np.minimum.reduceat(ts, bounds)
        wend[g[bounds]] = np.maximum.reduceat(end, bounds)
    base = np.where(has, wstart, 0.0)
    lt_all = rows.launch_ts[sel] if len(sel) else np.zeros(0)
    busy, idle_host, launch_known, gaps_per_step = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    by_cat = np.zeros((len(order_cats), n))
    # In batches of whole steps, so that the temporaries stay small whatever the trace's size.
    for lo, hi in _batches(g, _BATCH_ROWS):
        bs, be, bg, bc = ts[lo:hi], end[lo:hi], g[lo:hi], acat[lo:hi]
        u, gap_g, gap_s, gap_e, gap_rows = _group_union(bs, be, bg, n, base)
        busy += u
        if len(gap_rows):
            # idle while the host had not launched the next activity yet
            lt = lt_all[lo:hi][gap_rows]
            known = ~np.isnan(lt)
            idle_host += np.bincount(gap_g, weights=np.where(known & (lt > gap_s), gap_e - gap_s, 0.0),
                                     minlength=n)
            launch_known += np.bincount(gap_g, weights=known.astype(float), minlength=n)
            gaps_per_step += np.bincount(gap_g, minlength=n)
        # busy time per category, by priority: |U(first k)| - |U(first k-1)|. Where no two
        # categories overlap in a step (the common case: one stream), that is each category's union.
        part = np.zeros((len(order_cats), n))
        for k in np.unique(bc):
            mask = bc == k
            part[k] = _group_union(bs[mask], be[mask], bg[mask], n, base)[0]
        overlap = np.abs(part.sum(axis=0) - u) > 1e-6 * np.maximum(u, 1.0)
        if overlap.any():
            prev = np.zeros(n)
            for k in range(len(order_cats)):
                mask = bc <= k
                if mask.any():
                    cum = _group_union(bs[mask], be[mask], bg[mask], n, base)[0]
                    part[k, overlap] = (cum - prev)[overlap]
                    prev = cum
        by_cat += part
    kernel_sum = np.bincount(g, weights=dur, minlength=n)
    kcat = np.bincount(g * len(order_cats) + acat, weights=dur, minlength=n * len(order_cats)).reshape(n, -1)
    ar_k = cat_index.get(ALLREDUCE)
    ar_mask = acat == ar_k
    ar_sum = np.bincount(g[ar_mask], weights=dur[ar_mask], minlength=n)
    ar_calls = np.bincount(g[ar_mask], minlength=n)
    # starts and periods
    cpu_start = np.array([c.ts if c is not None else np.nan for c in rows.cpu])
    start = np.where(np.isnan(cpu_start), wstart, cpu_start)
    prev_end = np.r_[np.nan, wend[:-1]]
    start = np.where(np.isnan(prev_end), start, np.fmax(start, prev_end))
    start = np.where(np.isnan(start), np.array([s.ts for s in spans]), start)
    decode = np.array([s.step.phase in (DECODE, None) for s in spans])
    next_decode = np.full(n, np.nan)
    nxt = np.nan
    for i in range(n - 1, -1, -1):
        next_decode[i] = nxt
        if decode[i]:
            nxt = start[i]
    period = next_decode - start
    graph = _graph_launches(data, rows, n)
    table_cats = classifier.categories
    t0 = start[0]
    out = []
    for i, s in enumerate(spans):
        c = rows.cpu[i]
        window = wend[i] - wstart[i] if has[i] else None
        per = None if np.isnan(period[i]) else period[i]
        out.append({
            "index": i,
            "name": s.name,
            "phase": s.step.phase or DECODE,
            "family": s.step.family,
            "batch_size": s.step.batch_size,
            "context_requests": s.step.context_requests,
            "generation_requests": s.step.generation_requests,
            "scheduled_tokens": s.step.scheduled_tokens,
            "start_ms": _ms(start[i] - t0),
            "cpu_ms": _ms(c.dur) if c is not None else None,
            "span_ms": _ms(s.dur),
            "period_ms": _ms(per),
            "window_ms": _ms(window),
            "busy_ms": _ms(busy[i]),
            "idle_ms": _ms(window - busy[i]) if window is not None else None,
            "idle_host_ms": _ms(idle_host[i]) if launch_known[i] == gaps_per_step[i] else None,
            "host_ms": _ms(per - window) if per is not None and window is not None else None,
            "kernel_ms": _ms(kernel_sum[i]),
            "busy_ms_by_category": {c_: _ms(by_cat[k, i]) for k, c_ in enumerate(order_cats) if by_cat[k, i] > 0},
            "kernel_ms_by_category": {c_: _ms(kcat[i, cat_index[c_]]) for c_ in table_cats
                                      if kcat[i, cat_index[c_]] > 0},
            "allreduce_kernel_ms": _ms(ar_sum[i]),
            "allreduce_calls": int(ar_calls[i]),
            "graph_launches": int(graph[i]),
            "activities": int(counts[i]),
        })
    return out


def _graph_launches(data: TraceData, rows: StepRows, n: int) -> np.ndarray:
    if not data.graph_launches:
        return np.zeros(n, np.int64)
    ts = np.array([t for t, _ in data.graph_launches])
    cpu = [c for c in rows.cpu if c is not None]
    if len(cpu) == n:
        j = _in_spans(ts, rows.cpu)  # cpu spans are in step order, sorted by time
        return np.bincount(j[j >= 0], minlength=n)
    corr = np.array([c for _, c in data.graph_launches])
    acts = data.acts
    out = np.zeros(n, np.int64)
    for i in range(n):
        in_step = acts["corr"][rows.act_step == i]
        out[i] = int(np.isin(corr, in_step).sum())
    return out


def allreduce_calls(data: TraceData, classifier: Classifier, rows: StepRows) -> dict[str, np.ndarray | list]:
    """Every all-reduce call inside a step, in start order: step index, start, duration,
    element count, dtype and process group (None where the trace does not say), name."""
    cats = name_categories(data, classifier)
    is_ar = np.array([c == ALLREDUCE for c in cats], bool) if cats else np.zeros(0, bool)
    acts = data.acts
    if not len(acts):
        return {"step": np.zeros(0, np.int64), "ts": np.zeros(0), "dur": np.zeros(0), "nelems": [], "dtype": [],
                "group": [], "name": []}
    rows_ = np.flatnonzero((rows.act_step >= 0) & is_ar[acts["nid"]])
    rows_ = rows_[np.lexsort((acts["dur"][rows_], acts["ts"][rows_]))]
    args = [data.collective_args.get(int(r), (None, None, None)) for r in rows_]
    return {
        "step": rows.act_step[rows_], "ts": acts["ts"][rows_], "dur": acts["dur"][rows_],
        "nelems": [a[0] for a in args], "dtype": [a[1] for a in args], "group": [a[2] for a in args],
        "name": [data.names[int(nid)] for nid in acts["nid"][rows_]],
    }


def kernel_totals(data: TraceData, rows: StepRows, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel time (µs) and calls per activity name id over the activities of ``steps``."""
    n_names = len(data.names)
    if not len(data.acts) or not len(steps):
        return np.zeros(n_names), np.zeros(n_names, np.int64)
    mask = np.isin(rows.act_step, steps)
    nid = data.acts["nid"][mask]
    return (np.bincount(nid, weights=data.acts["dur"][mask], minlength=n_names),
            np.bincount(nid, minlength=n_names))


def trace_timeline(data: TraceData) -> dict | None:
    """The whole trace's GPU timeline: first activity start to last end (``span_ms``), the
    union of every activity (``busy_ms``) and the rest (``idle_ms``); None without activities."""
    acts = data.acts
    if not len(acts):
        return None
    order = np.argsort(acts["ts"], kind="stable")
    start = acts["ts"][order]
    reach = acts["dur"][order]
    del order
    reach += start
    np.maximum.accumulate(reach, out=reach)  # the latest end so far
    span = float(reach[-1] - start[0])
    gaps = start[1:] - reach[:-1]  # the GPU is idle where the next start lies beyond every end so far
    idle = float(gaps[gaps > 0].sum())
    return {"span_ms": _ms(span), "busy_ms": _ms(span - idle), "idle_ms": _ms(idle),
            "idle_share": round(idle / span, 4) if span > 0 else None}


def _ms(us) -> float | None:
    return None if us is None else round(float(us) / 1000.0, 4)
