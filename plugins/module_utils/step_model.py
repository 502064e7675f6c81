"""A decode step's cost at its load, from vLLM's stock ``/metrics``: the watch's slowdown signal.

A raw latency threshold cannot tell "slower" from "busier": the time between two tokens of a request
rises with the batch by design. Between two scrapes of ``/metrics`` (no profiler), an interval gives:

- ``steps``: engine steps, the count of ``vllm:iteration_tokens_total`` (one observation a step);
- ``tokens_per_step``: the tokens scheduled a step, prompt and generated (that histogram's sum over
  its count);
- ``batch``: the tokens generated a step (``vllm:generation_tokens_total`` over the steps), the decode
  batch as the step sees it (speculative tokens counted);
- ``step_ms``: the mean time between two tokens of one request (``vllm:inter_token_latency_seconds``
  sum over count; ``vllm:time_per_output_token_seconds`` where a release has only that), a decode step
  as the requests see it, the prefills between steps included; where neither histogram is exported,
  the interval over its steps while requests ran through all of it (``step_source`` says which);
- ``kv``: ``vllm:kv_cache_usage_perc`` at the interval's end (the context the batch reads).

The baseline (:func:`fit`) is ``step_ms = a + b * batch + c * kv`` by least squares over the intervals
of a known-good window (``c`` only when the window's KV usage varied apart from its batch), with its
band: three times the spread of the window's relative residuals, never under ``min_band``. An
interval's residual (:func:`residual`) is ``step_ms`` over the baseline's prediction at its own batch
and context, less one: +0.3 is "the same work costs 30% more", where a doubled load moves the
prediction, not the residual.

Standard library only, Python 3.9: the watch runs it on the host, beside itself.
"""

from __future__ import annotations

import statistics

STEPS = "vllm:iteration_tokens_total_count"
STEP_TOKENS = "vllm:iteration_tokens_total_sum"
GENERATED = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
KV = "vllm:kv_cache_usage_perc"
# The step time's sources, best first: (sum, count) of a histogram of the time between two tokens.
LATENCIES = (("vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count"),
             ("vllm:time_per_output_token_seconds_sum", "vllm:time_per_output_token_seconds_count"))
# Every metric the model reads (what a watch keeps of a scrape to fit a window later).
NAMES = (STEPS, STEP_TOKENS, GENERATED, RUNNING, KV, *(name for pair in LATENCIES for name in pair))
# What nothing can be judged without, and why.
REQUIRED = ((STEPS, "engine steps"), (GENERATED, "the decode batch"))
# An interval with fewer engine steps says too little to be judged or fitted on.
MIN_STEPS = 20
MIN_FIT_INTERVALS = 10
MIN_BAND = 0.10
# KV usage that follows the batch this closely adds nothing to the fit (and makes it singular).
MAX_CORRELATION = 0.95


class ModelError(Exception):
    """A baseline that cannot be fitted or read; the message says why."""


def missing(samples):
    """The metrics the model needs that an exposition lacks (parsed: name -> value), each with what is lost."""
    said = ["%s (%s: nothing can be judged)" % (name, what) for name, what in REQUIRED if name not in samples]
    if not any(total in samples and count in samples for total, count in LATENCIES):
        said.append("%s or %s (the step time falls back to the interval over its steps, judged only while "
                    "requests run through a whole interval)" % (LATENCIES[0][0][:-4], LATENCIES[1][0][:-4]))
    if KV not in samples:
        said.append("%s (the baseline is fitted on the batch alone)" % KV)
    return said


def _delta(before, after, name):
    if name not in before or name not in after:
        return None
    change = after[name] - before[name]
    return None if change < 0 else change  # a counter that went back: the server restarted


def interval(before, after, seconds):
    """The figures of the interval between two parsed scrapes ``seconds`` apart; None when the engine made
    fewer than :data:`MIN_STEPS` steps in it (idle, restarted, or a metric missing: nothing to judge)."""
    steps = _delta(before, after, STEPS)
    generated = _delta(before, after, GENERATED)
    if not steps or steps < MIN_STEPS or generated is None or seconds <= 0:
        return None
    step_ms, source = None, None
    for total, count in LATENCIES:
        spent, tokens = _delta(before, after, total), _delta(before, after, count)
        if spent is not None and tokens:
            step_ms, source = spent / tokens * 1000.0, total[:-4]
            break
    if step_ms is None and before.get(RUNNING, 0) > 0 and after.get(RUNNING, 0) > 0:
        step_ms, source = seconds / steps * 1000.0, "interval over steps"
    if step_ms is None:
        return None
    step_tokens = _delta(before, after, STEP_TOKENS)
    return {"seconds": seconds, "steps": steps, "steps_per_s": steps / seconds,
            "tokens_per_step": None if step_tokens is None else step_tokens / steps,
            "batch": generated / steps, "step_ms": step_ms, "step_source": source,
            "kv": after.get(KV), "running": after.get(RUNNING)}


def window_intervals(scrapes, start, end, count=20):
    """The intervals of a window of parsed scrapes, to fit a baseline on a known-good stretch (a benchmark)
    after it happened: ``scrapes`` is ``[(wall time, identity, samples)]`` in time order, ``identity`` the
    server's start (an interval never spans two); of those within ``[start, end]``, about ``count``
    intervals of equal length, each as :func:`interval` gives it with its end time as ``at``; those with
    too few steps (idle) left out."""
    inside = [s for s in scrapes if start <= s[0] <= end]
    if len(inside) < 2:
        return []
    length = (inside[-1][0] - inside[0][0]) / count
    out, before = [], inside[0]
    for after in inside[1:]:
        if after[1] != before[1]:
            before = after
            continue
        seconds = after[0] - before[0]
        if seconds >= length:
            measured = interval(before[2], after[2], seconds)
            if measured is not None:
                out.append(dict(measured, at=after[0]))
            before = after
    return out


def _solve(matrix, vector):
    """x of matrix x = vector (Gaussian elimination, partial pivoting); None when singular."""
    size = len(vector)
    rows = [[*matrix[i], vector[i]] for i in range(size)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(rows[r][col]))
        if abs(rows[pivot][col]) < 1e-12:
            return None
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(size):
            if r != col:
                ratio = rows[r][col] / rows[col][col]
                rows[r] = [a - ratio * b for a, b in zip(rows[r], rows[col])]
    return [rows[i][size] / rows[i][i] for i in range(size)]


def _correlation(xs, ys):
    """Pearson's r (statistics.correlation is Python 3.10's; the hosts may run 3.9); 0 for a constant."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sx, sy = statistics.pstdev(xs), statistics.pstdev(ys)
    if sx == 0 or sy == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / len(xs) / (sx * sy)


def fit(intervals, min_band=MIN_BAND, window=None):
    """The baseline of a known-good window's intervals (those :func:`interval` gave): ``{a, b, c, band,
    intervals, batch: [min, max], kv: [min, max] or None, window}``. Raises ModelError when there are too
    few intervals or their batch never varied and no single figure can stand for it."""
    usable = [iv for iv in intervals if iv is not None]
    if len(usable) < MIN_FIT_INTERVALS:
        raise ModelError("%d interval(s) with at least %d engine steps in the window; the baseline needs %d"
                         % (len(usable), MIN_STEPS, MIN_FIT_INTERVALS))
    kvs = [iv["kv"] for iv in usable]
    batches = [iv["batch"] for iv in usable]
    # the context counts where it varied apart from the batch (KV usage is batch times context: with one
    # context length it follows the batch and says nothing more)
    with_kv = (all(k is not None for k in kvs) and statistics.pstdev(kvs) > 0.01
               and abs(_correlation(batches, kvs)) < MAX_CORRELATION)
    columns = [[1.0, iv["batch"], iv["kv"] if with_kv else 0.0] for iv in usable]
    size = 3 if with_kv else 2
    if statistics.pstdev(batches) < 1e-9:
        # one load only: the step time at that batch is the whole baseline (b = 0)
        coef = [sum(iv["step_ms"] for iv in usable) / len(usable), 0.0, 0.0]
    else:
        normal = [[sum(row[i] * row[j] for row in columns) for j in range(size)] for i in range(size)]
        rhs = [sum(row[i] * iv["step_ms"] for row, iv in zip(columns, usable)) for i in range(size)]
        solved = _solve(normal, rhs)
        if solved is None:
            raise ModelError("the window's intervals do not determine a step time against the batch")
        coef = solved + [0.0] * (3 - size)
    baseline = {"a": coef[0], "b": coef[1], "c": coef[2], "band": min_band, "intervals": len(usable),
                "batch": [min(iv["batch"] for iv in usable), max(iv["batch"] for iv in usable)],
                "kv": [min(kvs), max(kvs)] if with_kv else None, "window": window}
    relative = [residual(baseline, iv) for iv in usable]
    baseline["band"] = max(min_band, 3.0 * statistics.pstdev(relative))
    return baseline


def predict(baseline, batch, kv=None):
    """The baseline's step time (ms) at a batch and a KV usage."""
    return baseline["a"] + baseline["b"] * batch + baseline["c"] * (kv or 0.0)


def residual(baseline, measured):
    """``step_ms`` of an interval over the baseline's prediction at the interval's own load, less one."""
    expected = predict(baseline, measured["batch"], measured["kv"])
    if expected <= 0:
        raise ModelError("the baseline predicts %.3g ms at batch %.3g: refit it on a window with this load"
                         % (expected, measured["batch"]))
    return measured["step_ms"] / expected - 1.0
