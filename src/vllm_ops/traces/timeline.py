"""One rank's steps on its GPU timeline: which activities belong to which step, and what
each step's time is made of. Plain numpy over the tables the reader spills to disk.

Memory: the activities and launch calls stay on disk (:mod:`.spill`). Each figure is computed
in passes that read a chunk of ``spill.CHUNK_ROWS`` (65,536) records at a time, or one batch of
whole steps of at most ``_BATCH_ROWS`` (65,536) activities (a step with more is one batch: its
union needs all of it). The orderings the figures need (launch calls by correlation, activities
by start, by step) are counting sorts into more tables on disk, closed when the figure is done.
What stays in memory grows with the steps, the names and the all-reduce calls (the output), not
with the activities. Every sum adds the same numbers in the same order as one numpy call over
all the activities would, so the figures do not depend on ``spill.CHUNK_ROWS`` (the batches of
steps, whose unions round with the batch, are cut where they were when the activities were
held in memory).

Definitions (one per figure; the CLI, the filters, the report and the history use these):

* **Attribution.** With GPU step annotations (``gpu_user_annotation``), an activity belongs
  to the step whose span holds its start (``start <= ts < end``; of overlapping spans, the
  one that started last). Without them (ROCm; CUDA set-ups that write no GPU projection),
  an activity belongs to the step whose CPU annotation (``user_annotation``) holds the host
  call that launched it, found by the activity's ``correlation`` (a CUDA graph launch
  brings every kernel that carries its correlation). ``steps_from`` says which.
* **One step, one span** (:func:`outermost`). A step span of an engine's annotation family
  that lies wholly inside a step span of another engine family, on the same side (CPU or GPU),
  names the same step twice (SGLang's ``step[DECODE bs=32]`` inside a vLLM-style ``execute_...``
  annotation): only the outer span is a step, and the inner ones are counted
  (``nested_spans``), never made steps of their own. Other nested step spans (a user's pattern
  that matches an annotation and the ones inside it) stay steps, as below.
* **Pairing** (:func:`pair_cpu_spans`). A GPU step span's CPU twin is the CPU step annotation
  with its ``External id`` when no two step annotations of a kind share an id and every twin
  starts at most :data:`PAIRING_SLACK_US` after its GPU span (a GPU step cannot start before
  its host began it); else the CPU step annotations in time order, when there are as many and
  that holds; else none. Repeated ids come from traces concatenated from several captures,
  whose ids each start from 1: pairing by them would join steps of different captures.
* ``capture``: the capture a step belongs to, 0 unless the trace is concatenated: a new capture
  starts where the step spans' External ids, in time order, fall back below the step before's
  (torch numbers them in issue order, from 1 in each capture). A capture's last step has no
  next step, so no period and no host gap.
* ``cpu_ms``: the step's CPU annotation (its twin); null without one. ``span_ms``: the
  annotation that defines the step (GPU span, or the CPU one where there is no GPU span).
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
* ``period_ms``: from this step's start to the next step's start on the same rank, whatever
  the next step's phase (null for the last step of a capture). The steps' periods partition the
  capture's time: a prefill step between two decode steps holds its own period, and none of it
  lands in the decode step before it. (Up to issue 30 the period ran to the next *decode* step,
  so an intervening prefill counted as the decode step's host time; for a capture of decode
  steps only the two definitions agree.) ``to_next_decode_ms``: from this step's start to the
  next decode step's start (null where none follows in the capture): what a client streaming a
  request sees as the inter-token time after this step, prefills in between included; no other
  figure is built on it.
  ``host_ms`` = ``period_ms`` - ``window_ms``: the period's time outside the GPU window
  (scheduling, sampling, launches before the first kernel and after the last).
* ``first_in_capture``: true for the first step (of any phase) of its capture: the step the
  profiler's start-up lands in (:mod:`.steady`).
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
* The step's *host span*: its CPU annotation, else the first to the last launch call of its
  activities. ``lead_ms``: the step's window start less its host span's start: how far the
  host runs ahead of its GPU (the GPU is still busy with earlier steps while the host begins
  this one).
* ``host_blocked_ms``: the time inside the host span spent in host calls that waited for the
  GPU (the reader's ``host_waits``: synchronizing calls, blocking copies, launch calls of at
  least ``BLOCKED_CALL_US``), nested calls counted once. ``host_step_ms``: the host span less
  that: the host's own time for the step. ``host_gap_ms``: from the host span's end to the next
  step's host span start (any phase, as for the period), less the waits in between (null for the last step and where
  the next host span starts before this one ends).
* ``context_tokens``, ``generation_tokens``, ``key_tokens``: the token counts the step's name
  gives (:mod:`.annotations`; ``key_tokens``: the decode requests' context lengths, summed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import spill
from .annotations import DECODE, ENGINE_FAMILIES
from .categories import ALLREDUCE, Classifier
from .reader import ACT_DTYPE, LAUNCH_DTYPE, Span, TraceData
from .spill import Table, partition, zip_chunks

COMMUNICATION = ("collective", ALLREDUCE)
# One activity inside a step, as the per-step passes read it: the activity, its launch time
# (nan: unknown), its row in the file and its step.
STEP_DTYPE = np.dtype([("ts", "<f8"), ("dur", "<f8"), ("nid", "<u4"), ("corr", "<i8"), ("lts", "<f8"),
                       ("row", "<i8"), ("step", "<i4")])


def busy_priority(classifier: Classifier) -> list[str]:
    """The order in which overlapping busy time is given to categories: compute first,
    communication last (so the all-reduce share is what compute did not hide)."""
    cats = classifier.categories
    return [c for c in cats if c not in COMMUNICATION] + [c for c in COMMUNICATION if c in cats]


@dataclass
class StepRows:
    """The steps of one rank, one entry per step in time order, and the activities by step,
    on disk (:mod:`.spill`): read a batch of whole steps at a time."""

    spans: list[Span]
    steps_from: str
    cpu: list[Span | None]
    step_of: Table  # per activity row (file order): step index (int32), -1 outside every step
    by_step: Table  # the activities inside steps (STEP_DTYPE), by step; file order within a step
    batches: list[tuple[int, int]]  # row ranges of by_step that hold whole steps
    counts: np.ndarray  # activities per step
    pairing: str | None = None  # how the CPU twins were found: "External id", "order" or None
    repeated_ids: int = 0  # step spans whose External id another one already carries
    captures: list[int] | None = None  # per step: the capture it belongs to (0, 1, ...)

    def close(self) -> None:
        self.step_of.close()
        self.by_step.close()

    def batch(self, lo: int, hi: int) -> np.ndarray:
        """One batch of ``by_step``, sorted by (step, start), ties in file order."""
        r = self.by_step.read(lo, hi)
        return r[np.lexsort((r["ts"], r["step"]))]


def name_categories(data: TraceData, classifier: Classifier) -> list[str]:
    """The category of each activity name id (``data.names``)."""
    return [classifier.classify(name, cat) for name, cat in zip(data.names, data.name_cats, strict=True)]


def _acts(data: TraceData) -> Table:
    if data.act_table is None:
        data.act_table = Table(ACT_DTYPE)
    return data.act_table


def launch_times(data: TraceData) -> Table:
    """The host launch time of each activity (float64 per activity row, file order, on disk;
    nan where no launch call carries its correlation); of several calls with one correlation,
    the earliest (the runtime call around a driver call).

    The launch calls are sorted by correlation on disk (:func:`.spill.sorted_batches`) and
    written back one per correlation; the activities then look theirs up chunk by chunk,
    reading the batch of calls they need (correlations follow the file order closely, so the
    batch read last is kept)."""
    acts, launches = _acts(data), data.launch_table
    out = Table(np.float64)
    try:
        if launches is None or not launches.rows:
            for _, a in acts.chunks():
                out.append(np.full(len(a), np.nan))
            return out
        first = Table(LAUNCH_DTYPE)
        try:
            starts, edges = [], []  # each batch of `first`: its first row and its least correlation
            pending = np.zeros(0, LAUNCH_DTYPE)  # the last correlation so far: more calls may carry it
            for calls in spill.sorted_batches(launches, "corr"):
                calls = np.concatenate([pending, calls])
                calls = calls[np.lexsort((calls["ts"], calls["corr"]))]
                keep = np.ones(len(calls), bool)
                keep[1:] = calls["corr"][1:] != calls["corr"][:-1]
                calls = calls[keep]
                calls, pending = calls[:-1], calls[-1:]
                if len(calls):
                    starts.append(first.rows)
                    edges.append(int(calls["corr"][0]))
                    first.append(calls)
            starts.append(first.rows)  # the greatest correlation, a batch of its own
            edges.append(int(pending["corr"][0]))
            first.append(pending)
            starts.append(first.rows)
            edges = np.array(edges, np.int64)
            cached, table = -1, None
            for _, a in acts.chunks():
                corr = a["corr"]
                lt = np.full(len(a), np.nan)
                b = np.searchsorted(edges, corr, side="right") - 1
                valid = (b >= 0) & (corr >= 0)
                for k in np.unique(b[valid]).tolist():
                    if k != cached:
                        cached, table = k, first.read(starts[k], starts[k + 1])
                    m = valid & (b == k)
                    c = corr[m]
                    idx = np.searchsorted(table["corr"], c)
                    idx[idx >= len(table)] = len(table) - 1
                    lt[m] = np.where(table["corr"][idx] == c, table["ts"][idx], np.nan)
                out.append(lt)
        finally:
            first.close()
    except BaseException:
        out.close()
        raise
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


def pick_steps(data: TraceData, spans_gpu: list[Span], spans_cpu: list[Span], launch_ts: Table) -> StepRows:
    """Attribute the activities to steps (GPU spans when there are any, else CPU spans by
    correlation) and pair each step with its CPU annotation. Two passes over the activities:
    one finds each one's step and counts them per step, one writes them by step (a counting
    sort into batches of whole steps, :func:`.spill.partition`)."""
    repeated = 0
    if spans_gpu:
        spans = sorted(spans_gpu, key=lambda s: s.ts)
        cpu, pairing, repeated = pair_cpu_spans(spans, spans_cpu)
        steps_from = "gpu_user_annotation"
    else:
        spans = sorted(spans_cpu, key=lambda s: s.ts)
        cpu, steps_from, pairing = list(spans), "user_annotation", None
    acts, n = _acts(data), len(spans)
    step_of = Table(np.int32)
    try:
        counts = np.zeros(n, np.int64)
        for _, a, lt in zip_chunks(acts, launch_ts):
            step = _in_spans(a["ts"] if spans_gpu else lt, spans)
            step_of.append(step.astype(np.int32))
            counts += np.bincount(step[step >= 0], minlength=n)

        def records():
            for lo, a, lt, step in zip_chunks(acts, launch_ts, step_of):
                r = np.empty(len(a), STEP_DTYPE)
                for k in ("ts", "dur", "nid", "corr"):
                    r[k] = a[k]
                r["lts"], r["row"], r["step"] = lt, np.arange(lo, lo + len(a)), step
                yield step, r

        by_step, batches = partition(records(), counts, _BATCH_ROWS, STEP_DTYPE)
    except BaseException:
        step_of.close()
        raise
    return StepRows(spans, steps_from, cpu, step_of, by_step, batches, counts, pairing, repeated,
                    capture_numbers(spans))


def outermost(spans: list[Span]) -> tuple[list[Span], int]:
    """The step spans less those that name a step a span of another engine family already names
    (see the module docstring, **One step, one span**), in time order, and how many were dropped."""
    kept: list[Span] = []
    outer: Span | None = None  # the latest engine-family span that reaches furthest
    nested = 0
    for sp in sorted(spans, key=lambda x: (x.ts, -x.dur)):
        family = sp.step.family
        if (outer is not None and family in ENGINE_FAMILIES and family != outer.step.family
                and sp.ts + sp.dur <= outer.ts + outer.dur):
            nested += 1
            continue
        kept.append(sp)
        if family in ENGINE_FAMILIES and (outer is None or sp.ts + sp.dur > outer.ts + outer.dur):
            outer = sp
    return kept, nested


def capture_numbers(spans: list[Span]) -> list[int]:
    """Each step's capture (see the module docstring): a new one starts where the step spans'
    External ids, in time order, fall back below the step before's."""
    out, k, prev = [], 0, None
    for s in spans:
        if prev is not None and 0 <= s.ext < prev:
            k += 1
        prev = s.ext if s.ext >= 0 else prev
        out.append(k)
    return out


# A GPU step span cannot start before the host began the step; this much earlier (µs) is left
# to the skew between the CPU and GPU clocks of one trace.
PAIRING_SLACK_US = 1000.0


def pair_cpu_spans(gpu: list[Span], cpu: list[Span]) -> tuple[list[Span | None], str | None, int]:
    """Each GPU step span's CPU twin (see the module docstring, **Pairing**): ``(twins, how,
    repeated)``, ``how`` being ``"External id"``, ``"order"`` or None (no twins), and ``repeated``
    the step spans whose External id another step span of the same kind already carries."""
    if not cpu:
        return [None] * len(gpu), None, 0

    def plausible(twins):
        return all(c.ts <= g.ts + PAIRING_SLACK_US for g, c in zip(gpu, twins, strict=True))

    gpu_ids = [s.ext for s in gpu if s.ext >= 0]
    cpu_ids = [s.ext for s in cpu if s.ext >= 0]
    repeated = len(gpu_ids) - len(set(gpu_ids)) + len(cpu_ids) - len(set(cpu_ids))
    by_ext = {s.ext: s for s in cpu if s.ext >= 0}
    if not repeated and all(s.ext in by_ext for s in gpu):
        twins = [by_ext[s.ext] for s in gpu]
        if plausible(twins):
            return twins, "External id", 0
    in_order = sorted(cpu, key=lambda s: s.ts)
    if len(in_order) == len(gpu) and plausible(in_order):
        return in_order, "order", repeated
    return [None] * len(gpu), None, repeated


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


def step_table(data: TraceData, classifier: Classifier, rows: StepRows) -> list[dict]:
    """One dict per step (see the module docstring), all times in ms; the cross-rank
    all-reduce fields are left for :mod:`.collectives` to fill in."""
    spans = rows.spans
    n = len(spans)
    if not n:
        return []
    cats = name_categories(data, classifier)
    order_cats = busy_priority(classifier)
    n_cats = len(order_cats)
    cat_index = {c: i for i, c in enumerate(order_cats)}
    name_cat = np.array([cat_index[c] for c in cats], np.int16) if cats else np.zeros(0, np.int16)
    ar_k = cat_index.get(ALLREDUCE)
    counts = rows.counts
    has = counts > 0
    wstart = np.full(n, np.nan)
    wend = np.full(n, np.nan)
    lfirst = np.full(n, np.nan)  # the first and last launch call of the step's activities
    llast = np.full(n, np.nan)
    busy, idle_host, launch_known, gaps_per_step = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    by_cat = np.zeros((n_cats, n))
    kernel_sum, ar_sum, ar_calls = np.zeros(n), np.zeros(n), np.zeros(n, np.int64)
    kcat = np.zeros(n * n_cats)
    # In batches of whole steps read from disk, so that memory stays bounded whatever the
    # trace's size. Each step lies in one batch, so every per-step sum adds the same numbers in
    # the same order as over all the activities at once.
    for lo, hi in rows.batches:
        r = rows.batch(lo, hi)
        g, bs, dur, lt_all = r["step"], r["ts"], r["dur"], r["lts"]
        be = bs + dur
        bc = name_cat[r["nid"]]
        del r
        bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        wstart[g[bounds]] = np.minimum.reduceat(bs, bounds)
        wend[g[bounds]] = np.maximum.reduceat(be, bounds)
        lfirst[g[bounds]] = np.fmin.reduceat(lt_all, bounds)
        llast[g[bounds]] = np.fmax.reduceat(lt_all, bounds)
        base = np.where(has, wstart, 0.0)
        u, gap_g, gap_s, gap_e, gap_rows = _group_union(bs, be, g, n, base)
        busy += u
        if len(gap_rows):
            # idle while the host had not launched the next activity yet
            lt = lt_all[gap_rows]
            known = ~np.isnan(lt)
            idle_host += np.bincount(gap_g, weights=np.where(known & (lt > gap_s), gap_e - gap_s, 0.0),
                                     minlength=n)
            launch_known += np.bincount(gap_g, weights=known.astype(float), minlength=n)
            gaps_per_step += np.bincount(gap_g, minlength=n)
        # busy time per category, by priority: |U(first k)| - |U(first k-1)|. Where no two
        # categories overlap in a step (the common case: one stream), that is each category's union.
        part = np.zeros((n_cats, n))
        for k in np.unique(bc):
            mask = bc == k
            part[k] = _group_union(bs[mask], be[mask], g[mask], n, base)[0]
        overlap = np.abs(part.sum(axis=0) - u) > 1e-6 * np.maximum(u, 1.0)
        if overlap.any():
            prev = np.zeros(n)
            for k in range(n_cats):
                mask = bc <= k
                if mask.any():
                    cum = _group_union(bs[mask], be[mask], g[mask], n, base)[0]
                    part[k, overlap] = (cum - prev)[overlap]
                    prev = cum
        by_cat += part
        kernel_sum += np.bincount(g, weights=dur, minlength=n)
        kcat += np.bincount(g * n_cats + bc, weights=dur, minlength=n * n_cats)
        ar_mask = bc == ar_k
        ar_sum += np.bincount(g[ar_mask], weights=dur[ar_mask], minlength=n)
        ar_calls += np.bincount(g[ar_mask], minlength=n)
    kcat = kcat.reshape(n, -1)
    # starts and periods
    cpu_start = np.array([c.ts if c is not None else np.nan for c in rows.cpu])
    start = np.where(np.isnan(cpu_start), wstart, cpu_start)
    prev_end = np.r_[np.nan, wend[:-1]]
    start = np.where(np.isnan(prev_end), start, np.fmax(start, prev_end))
    start = np.where(np.isnan(start), np.array([s.ts for s in spans]), start)
    decode = np.array([s.step.phase in (DECODE, None) for s in spans])
    capture = rows.captures or [0] * n
    next_start = np.full(n, np.nan)  # the next step's start, any phase, within the capture
    next_decode = np.full(n, np.nan)
    nxt = nxt_decode = np.nan
    for i in range(n - 1, -1, -1):
        if i + 1 < n and capture[i + 1] != capture[i]:
            nxt = nxt_decode = np.nan  # the last step of a capture has no next step
        next_start[i], next_decode[i] = nxt, nxt_decode
        nxt = start[i]
        if decode[i]:
            nxt_decode = start[i]
    period = next_start - start
    to_next_decode = next_decode - start
    first_in_capture = [i == 0 or capture[i] != capture[i - 1] for i in range(n)]
    graph = _graph_launches(data, rows, n)
    host = _host_figures(data, rows, wstart, lfirst, llast, capture)
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
            "to_next_decode_ms": None if np.isnan(to_next_decode[i]) else _ms(to_next_decode[i]),
            "first_in_capture": first_in_capture[i],
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
            "capture": capture[i],
            "context_tokens": s.step.context_tokens,
            "generation_tokens": s.step.generation_tokens,
            "key_tokens": s.step.key_tokens,
            **{k: _ms(v[i]) if not np.isnan(v[i]) else None for k, v in host.items()},
        })
    return out


def _host_figures(data: TraceData, rows: StepRows, wstart: np.ndarray, lfirst: np.ndarray,
                  llast: np.ndarray, capture: list[int]) -> dict[str, np.ndarray]:
    """``lead_ms``, ``host_blocked_ms``, ``host_step_ms`` and ``host_gap_ms`` of each step (µs, nan:
    unknown; see the module docstring)."""
    n = len(rows.spans)
    cpu = rows.cpu
    h_start = np.array([c.ts if c is not None else np.nan for c in cpu])
    h_end = np.array([c.ts + c.dur if c is not None else np.nan for c in cpu])
    no_cpu = np.isnan(h_start)
    h_start[no_cpu], h_end[no_cpu] = lfirst[no_cpu], llast[no_cpu]
    waits = sorted(data.host_waits)
    w_s = np.array([t for t, _ in waits])
    w_e = w_s + np.array([d for _, d in waits]) if waits else np.zeros(0)
    longest = float((w_e - w_s).max()) if waits else 0.0

    def waited(a: float, b: float) -> float:
        """The time inside [a, b) that the host spent in calls that waited for its GPU (the calls'
        intervals clipped to it and merged, so that a call inside another counts once)."""
        if not len(w_s) or not b > a:
            return 0.0
        lo, hi = np.searchsorted(w_s, [a - longest, b], side="left").tolist()
        total, end = 0.0, a
        for x, y in zip(w_s[lo:hi].tolist(), w_e[lo:hi].tolist(), strict=True):
            x, y = max(x, end), min(y, b)
            if y > x:
                total += y - x
                end = y
        return total

    blocked, gap = np.full(n, np.nan), np.full(n, np.nan)
    next_start, nxt = np.full(n, np.nan), np.nan
    for i in range(n - 1, -1, -1):
        if i + 1 < n and capture[i + 1] != capture[i]:
            nxt = np.nan
        next_start[i] = nxt
        if not np.isnan(h_start[i]):
            nxt = h_start[i]
    for i in range(n):
        if not np.isnan(h_start[i]):
            blocked[i] = waited(h_start[i], h_end[i])
            if not np.isnan(next_start[i]) and next_start[i] >= h_end[i]:
                gap[i] = next_start[i] - h_end[i] - waited(h_end[i], next_start[i])
    return {"lead_ms": wstart - h_start, "host_blocked_ms": blocked, "host_step_ms": h_end - h_start - blocked,
            "host_gap_ms": gap}


def _graph_launches(data: TraceData, rows: StepRows, n: int) -> np.ndarray:
    if not data.graph_launches:
        return np.zeros(n, np.int64)
    ts = np.array([t for t, _ in data.graph_launches])
    cpu = [c for c in rows.cpu if c is not None]
    if len(cpu) == n:
        j = _in_spans(ts, rows.cpu)  # cpu spans are in step order, sorted by time
        return np.bincount(j[j >= 0], minlength=n)
    corr = np.array([c for _, c in data.graph_launches])
    out = np.zeros(n, np.int64)
    for lo, hi in rows.batches:
        r = rows.batch(lo, hi)
        g = r["step"]
        bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1], True])
        for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            out[g[s]] = int(np.isin(corr, r["corr"][s:e]).sum())
    return out


def allreduce_calls(data: TraceData, classifier: Classifier, rows: StepRows) -> dict[str, np.ndarray | list]:
    """Every all-reduce call inside a step, in start order: step index, start, duration,
    element count, dtype and process group (None where the trace does not say), name."""
    cats = name_categories(data, classifier)
    is_ar = np.array([c == ALLREDUCE for c in cats], bool) if cats else np.zeros(0, bool)
    if not _acts(data).rows:
        return {"step": np.zeros(0, np.int64), "ts": np.zeros(0), "dur": np.zeros(0), "nelems": [], "dtype": [],
                "group": [], "name": []}
    parts = [np.zeros(0, STEP_DTYPE)]
    for lo, hi in rows.batches:
        r = rows.by_step.read(lo, hi)
        parts.append(r[is_ar[r["nid"]]])
    calls = np.concatenate(parts)
    calls = calls[np.lexsort((calls["row"], calls["dur"], calls["ts"]))]  # start, duration, file order
    args = data.collective_args_at(calls["row"])
    return {
        "step": calls["step"].astype(np.int64), "ts": calls["ts"].copy(), "dur": calls["dur"].copy(),
        "nelems": [a[0] for a in args], "dtype": [a[1] for a in args], "group": [a[2] for a in args],
        "name": [data.names[int(nid)] for nid in calls["nid"]],
    }


def kernel_totals(data: TraceData, rows: StepRows, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel time (µs) and calls per activity name id over the activities of ``steps``, summed
    in file order (a chunk's sums start from the last chunk's totals, so the rounding is that of
    one sum over the whole file)."""
    n_names = len(data.names)
    acts = _acts(data)
    tot, cnt = np.zeros(n_names), np.zeros(n_names, np.int64)
    if not acts.rows or not len(steps):
        return tot, cnt
    ids = np.arange(n_names)
    for _, a, step in zip_chunks(acts, rows.step_of):
        mask = np.isin(step, steps)
        nid = a["nid"][mask]
        tot = np.bincount(np.r_[ids, nid], weights=np.r_[tot, a["dur"][mask]], minlength=n_names)
        cnt += np.bincount(nid, minlength=n_names)
    return tot, cnt


def trace_timeline(data: TraceData) -> dict | None:
    """The whole trace's GPU timeline: first activity start to last end (``span_ms``), the
    union of every activity (``busy_ms``) and the rest (``idle_ms``); None without activities.
    ``first_us`` and ``last_us``: that first start and last end, in the trace's ``ts`` (µs).

    The activities come sorted by start in batches (:func:`.spill.sorted_batches`); each batch
    carries the latest end so far into the next, and the idle gaps go to disk to be summed as
    one array would be."""
    acts = _acts(data)
    if not acts.rows:
        return None
    gaps = Table(np.float64)
    try:
        first = last = None
        for r in spill.sorted_batches(acts, "ts"):
            start = r["ts"]
            reach = r["dur"]
            reach += start
            np.maximum.accumulate(reach, out=reach)  # the latest end so far
            if last is None:
                first, g = start[0], start[1:] - reach[:-1]
            else:
                np.maximum(reach, last, out=reach)
                g = np.r_[start[0] - last, start[1:] - reach[:-1]]
            last = reach[-1]
            gaps.append(g[g > 0])  # the GPU is idle where the next start lies beyond every end so far
        span = float(last - first)
        idle = float(spill.pairwise_sum(gaps))
    finally:
        gaps.close()
    return {"span_ms": _ms(span), "busy_ms": _ms(span - idle), "idle_ms": _ms(idle),
            "idle_share": round(idle / span, 4) if span > 0 else None,
            "first_us": float(first), "last_us": float(last)}


def _ms(us) -> float | None:
    return None if us is None else round(float(us) / 1000.0, 4)
