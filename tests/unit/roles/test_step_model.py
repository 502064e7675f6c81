"""The watch's load-normalised step time (plugins/module_utils/step_model.py) on recorded /metrics sequences.

The sequences are written here by a small server model: each engine step takes ``a + b * batch`` ms (a
factor ``slower`` on top), generates ``batch`` tokens and schedules ``prefill`` prompt tokens besides,
and every generated token's inter-token latency is its step's time. What the step model must find is
computed here from that model, or with numpy's least squares, never from the code under test.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import step_model as sm

A_MS, B_MS = 8.0, 0.25
SCRAPE_S = 15.0


def scrapes(loads, *, slower=1.0, jitter=(), kv_per_batch=0.01, prefill=2.0, latency="itl", contexts=(),
            c_ms=0.0):
    """Cumulative /metrics samples, one per SCRAPE_S, for a sequence of decode batches; the i-th interval's
    step time is multiplied by ``jitter[i % len(jitter)]`` when given. KV usage is ``kv_per_batch`` a
    request, times ``contexts[i]`` when given (the context length, relative), and each step costs ``c_ms``
    more per unit of KV usage."""
    names = {"itl": ("vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count"),
             "tpot": ("vllm:time_per_output_token_seconds_sum", "vllm:time_per_output_token_seconds_count"),
             None: None}[latency]
    total = {sm.STEPS: 0.0, sm.STEP_TOKENS: 0.0, sm.GENERATED: 0.0, sm.RUNNING: 0.0, sm.KV: 0.0}
    if names:
        total.update({names[0]: 0.0, names[1]: 0.0})
    out = [dict(total)]
    for i, batch in enumerate(loads):
        kv = kv_per_batch * batch * (contexts[i] if contexts else 1.0)
        step_ms = (A_MS + B_MS * batch + c_ms * kv) * slower * (jitter[i % len(jitter)] if jitter else 1.0)
        steps = SCRAPE_S * 1000.0 / step_ms
        total[sm.STEPS] += steps
        total[sm.STEP_TOKENS] += steps * (batch + prefill)
        total[sm.GENERATED] += steps * batch
        if names:
            total[names[0]] += steps * batch * step_ms / 1000.0
            total[names[1]] += steps * batch
        total[sm.RUNNING] = batch
        total[sm.KV] = kv
        out.append(dict(total))
    return out


def intervals(samples):
    return [sm.interval(before, after, SCRAPE_S) for before, after in itertools.pairwise(samples)]


# A known-good day: the batch from 4 to 32 and back, each step within +-2% of the model.
DAY = [4, 8, 12, 16, 20, 24, 28, 32, 28, 24, 20, 16, 12, 8, 4, 6, 10, 14, 18, 22]
JITTER = (1.0, 1.02, 0.98, 1.01, 0.99)


def test_an_interval_reads_the_step_the_batch_and_the_tokens_a_step():
    (iv,) = intervals(scrapes([16]))
    assert iv["batch"] == pytest.approx(16)
    assert iv["step_ms"] == pytest.approx(A_MS + B_MS * 16)
    assert iv["steps_per_s"] == pytest.approx(1000 / (A_MS + B_MS * 16))
    assert iv["tokens_per_step"] == pytest.approx(18)
    assert iv["step_source"] == "vllm:inter_token_latency_seconds"


def test_the_baseline_is_the_least_squares_line_with_its_band():
    baseline = sm.fit(intervals(scrapes(DAY, jitter=JITTER)))
    measured = np.array([(A_MS + B_MS * b) * JITTER[i % len(JITTER)] for i, b in enumerate(DAY)])
    design = np.column_stack([np.ones(len(DAY)), DAY, [0.01 * b for b in DAY]])
    # KV usage is proportional to the batch here: the two columns cannot be told apart, so numpy's
    # minimum-norm answer is the comparison for the prediction, not for each coefficient
    coef, *_ = np.linalg.lstsq(design, measured, rcond=None)
    predicted = design @ coef
    for batch, want in zip(DAY, predicted, strict=True):
        assert sm.predict(baseline, batch, 0.01 * batch) == pytest.approx(want, rel=1e-6)
    spread = np.std(measured / predicted - 1)
    assert baseline["band"] == pytest.approx(max(0.10, 3 * spread))
    assert baseline["intervals"] == len(DAY) and baseline["batch"] == [4, 32]


def test_a_doubled_load_at_the_same_speed_stays_in_the_band():
    baseline = sm.fit(intervals(scrapes(DAY, jitter=JITTER)))
    busier = intervals(scrapes([16, 16, 32, 32, 32]))
    # the raw step time rose by (8 + 0.25 * 32) / (8 + 0.25 * 16) - 1 = 33%, and nothing is slower
    assert busier[-1]["step_ms"] / busier[0]["step_ms"] - 1 == pytest.approx(16 / 12 - 1)
    assert all(abs(sm.residual(baseline, iv)) < baseline["band"] for iv in busier)


def test_the_same_load_30_percent_slower_is_outside_the_band():
    baseline = sm.fit(intervals(scrapes(DAY, jitter=JITTER)))
    slower = intervals(scrapes([16, 16, 16], slower=1.3))
    for iv in slower:
        assert sm.residual(baseline, iv) == pytest.approx(0.3, abs=0.01)
        assert sm.residual(baseline, iv) > baseline["band"]


def test_noisier_windows_widen_the_band():
    wide = (1.0, 1.08, 0.92, 1.05, 0.95)
    baseline = sm.fit(intervals(scrapes(DAY, jitter=wide)))
    measured = np.array([(A_MS + B_MS * b) * wide[i % len(wide)] for i, b in enumerate(DAY)])
    slope, intercept = np.polyfit(DAY, measured, 1)
    spread = np.std(measured / (intercept + slope * np.array(DAY)) - 1)
    assert 3 * spread > 0.10
    assert baseline["band"] == pytest.approx(3 * spread, rel=1e-6)


def test_a_longer_context_at_the_same_batch_is_a_load_change_not_a_slowdown():
    contexts = [1.0, 2.0, 1.5, 3.0, 0.5, 2.5, 1.0, 2.0, 3.0, 1.5, 0.5, 2.0, 1.0, 2.5, 3.0, 1.0, 2.0, 0.5, 1.5, 2.5]
    baseline = sm.fit(intervals(scrapes(DAY, contexts=contexts, c_ms=20.0, jitter=JITTER)))
    assert baseline["c"] == pytest.approx(20.0, rel=0.1)
    # batch 16 at three times the context: 8 + 4 + 20 * 0.48 = 21.6 ms a step, 80% above the short context's
    longer = intervals(scrapes([16, 16], contexts=[3.0, 3.0], c_ms=20.0))
    assert longer[-1]["step_ms"] == pytest.approx(A_MS + B_MS * 16 + 20.0 * 0.01 * 16 * 3)
    assert abs(sm.residual(baseline, longer[-1])) < baseline["band"]
    slower = intervals(scrapes([16, 16], contexts=[3.0, 3.0], c_ms=20.0, slower=1.3))
    assert sm.residual(baseline, slower[-1]) == pytest.approx(0.3, abs=0.03)


def test_one_steady_load_is_a_baseline_of_one_figure():
    baseline = sm.fit(intervals(scrapes([16] * 12)))
    assert (baseline["b"], baseline["c"]) == (0.0, 0.0)
    assert baseline["a"] == pytest.approx(A_MS + B_MS * 16)


def test_too_short_a_window_is_refused_saying_how_many_it_needs():
    with pytest.raises(sm.ModelError, match=r"^3 interval\(s\) with at least 20 engine steps in the window; "
                                            r"the baseline needs 10$"):
        sm.fit(intervals(scrapes([4, 8, 12])))


def test_idle_and_restarted_intervals_are_not_judged():
    idle = scrapes([16])
    idle.append(dict(idle[-1]))  # no step between the last two scrapes
    assert intervals(idle)[-1] is None
    restarted = scrapes([16, 16])
    restarted[-1] = {name: value / 10 for name, value in restarted[-1].items()}  # counters went back
    assert intervals(restarted)[-1] is None


def test_a_release_with_only_the_older_histogram_uses_it():
    (iv,) = intervals(scrapes([16], latency="tpot"))
    assert iv["step_source"] == "vllm:time_per_output_token_seconds"
    assert iv["step_ms"] == pytest.approx(A_MS + B_MS * 16)


def test_without_a_latency_histogram_the_pace_stands_in_and_the_gap_is_named():
    samples = scrapes([16, 16], latency=None)
    (said,) = sm.missing(samples[-1])
    assert said.startswith("vllm:inter_token_latency_seconds or vllm:time_per_output_token_seconds (the step "
                           "time falls back to the interval over its steps")
    first, second = intervals(samples)
    assert first is None  # no request ran at the first scrape: the pace is no step time
    assert second["step_source"] == "interval over steps"
    assert second["step_ms"] == pytest.approx(A_MS + B_MS * 16)
    assert sm.missing({})[:2] == ["vllm:iteration_tokens_total_count (engine steps: nothing can be judged)",
                                  "vllm:generation_tokens_total (the decode batch: nothing can be judged)"]


def test_a_past_window_is_cut_into_intervals_within_one_start_and_its_idle_ones_left_out():
    """window_intervals: a benchmark's window of scrapes (one every SCRAPE_S) after the fact; the scrapes
    before and after it, a restart inside it (the counters start again) and an idle stretch give nothing."""
    loads = [0, 0, 8, 8, 8, 8, 16, 16, 16, 16, 0, 0]
    samples = scrapes(loads)
    restarted = scrapes([16, 16, 16])  # a new start: its counters from 0
    timed = [(1000 + i * SCRAPE_S, "one", s) for i, s in enumerate(samples)]
    timed += [(timed[-1][0] + (i + 1) * SCRAPE_S, "two", s) for i, s in enumerate(restarted)]
    start, end = timed[2][0], timed[-1][0]  # from the benchmark's first scrape to the last after the restart
    intervals = sm.window_intervals(timed, start, end, count=len(timed))  # one scrape an interval
    # the eight loaded intervals of the first start (the two idle at its end give too few steps), then the
    # restart's three: none spans the two starts
    assert [round(iv["batch"]) for iv in intervals] == [8, 8, 8, 8, 16, 16, 16, 16, 16, 16, 16]
    assert all(iv["step_ms"] == pytest.approx(A_MS + B_MS * iv["batch"]) for iv in intervals)
    assert [iv["at"] for iv in intervals][:1] == [timed[3][0]]
    assert sm.window_intervals(timed, 0, 999) == [] and sm.window_intervals(timed[:1], 0, 10**6) == []
