"""Decode steps in two regimes (issue 20, point 3): the steps the median-based rule leaves out
are reported as a regime of their own, with their own verdict, and the headline says so.

The trace is made here: 19 decode steps of one rank. Twelve run GPU-bound (the host launches
ten GEMMs in 0.5 ms, then waits in cudaStreamSynchronize for the GPU, 9.5 ms of kernels, 10 ms a
step); seven run host-bound (the host takes 29.6 ms to launch the same ten GEMMs, one every
2.9 ms, 30 ms a step). The expected figures come from that plan, computed here.
"""

from __future__ import annotations

import gzip
import statistics
from itertools import pairwise

import pytest

from vllm_ops.traces import summarize
from vllm_ops.traces.render import verdict_sentence

STEP = "execute_context_0(0)_generation_1(1)"
GEMM = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT"
SLOW = (2, 5, 7, 10, 12, 15, 17)
STEPS = 19
KERNELS, KERNEL_US = 10, 950.0


def _x(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if cat in ("kernel", "gpu_user_annotation") else 100,
            "tid": 7 if cat in ("kernel", "gpu_user_annotation") else 100, "ts": ts, "dur": dur, "args": args}


def _plan(slow_steps=SLOW):
    """Events and, per step, (start, CPU duration, kernel starts) in µs."""
    events, plan, t, corr = [], [], 1_000_000.0, 1
    for k in range(STEPS):
        slow = k in slow_steps
        cpu_dur = 29_600.0 if slow else 9_600.0
        launches = [t + 10.0 + i * (2900.0 if slow else 50.0) for i in range(KERNELS)]
        starts = []
        gpu_free = t + 50.0
        for lt in launches:
            ks = max(lt + 40.0, gpu_free)
            events.append(_x("cuda_runtime", "cudaLaunchKernel", lt, 5.0, correlation=corr))
            events.append(_x("kernel", GEMM, ks, KERNEL_US, correlation=corr))
            starts.append(ks)
            gpu_free = ks + KERNEL_US
            corr += 1
        if not slow:  # the host waits for the GPU at the end of the step
            events.append(_x("cuda_runtime", "cudaStreamSynchronize", t + 600.0, cpu_dur - 600.0))
        ext = 1000 + k
        events.append(_x("user_annotation", STEP, t, cpu_dur, **{"External id": ext}))
        events.append(_x("gpu_user_annotation", STEP, starts[0], gpu_free - starts[0], **{"External id": ext}))
        plan.append((t, cpu_dur, starts))
        t += 30_000.0 if slow else 10_000.0
    return events, plan


def _summary(tmp_path, ev, slow_steps=SLOW):
    events, plan = _plan(slow_steps)
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}],
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": events}
    path = tmp_path / "r_rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(ev.render(doc).encode()))
    return plan, summarize([str(path)])


@pytest.fixture
def two_regimes(tmp_path, ev):
    return _summary(tmp_path, ev)


def test_the_left_out_steps_are_a_regime_with_their_own_verdict(two_regimes):
    plan, s = two_regimes
    starts = [p[0] for p in plan]
    periods = [b - a for a, b in pairwise(starts)]
    windows = [p[2][-1] + KERNEL_US - p[2][0] for p in plan]
    durations = [*periods, windows[-1]]  # what the rule compares: the period, the last step's window
    median = statistics.median(durations)
    outliers = [k for k, d in enumerate(durations) if abs(d - median) > 0.5 * median]
    assert outliers == list(SLOW) and median == 10_000.0
    share = sum(durations[k] for k in SLOW) / sum(durations)
    assert share > 0.6  # the minority holds most of the decode time
    (reg,) = s["regimes"]
    assert (reg["steps"], reg["count"], reg["decode_steps"], reg["side"]) == (list(SLOW), 7, STEPS, "slower")
    assert reg["time_share"] == pytest.approx(share, abs=1e-4)
    assert reg["period_ms"] == pytest.approx(statistics.median(durations[k] for k in SLOW) / 1000.0)
    # its own verdict: the host takes 29.6 ms to issue the step, the GPU works 9.5 ms of it
    rv = reg["verdict"]
    assert (rv["kind"], rv["rank"]) == ("host-bound", 0)
    assert rv["evidence"]["host_ms_per_step"] == pytest.approx((29_600.0 + 400.0) / 1000.0, abs=1e-3)
    assert rv["evidence"]["gpu_ms_per_step"] == pytest.approx(KERNELS * KERNEL_US / 1000.0, abs=1e-3)
    # the steady steps: the host's own time is 0.6 ms (launches) + 0.4 ms (gap), its wait in the
    # synchronize left out; the GPU's 9.5 ms of GEMMs bound the step
    v = s["verdict"]
    assert (v["kind"], v["category"]) == ("compute-bound", "gemm")
    assert v["evidence"]["host_ms_per_step"] == pytest.approx(1.0, abs=1e-3)
    assert v["evidence"]["gpu_ms_per_step"] == pytest.approx(9.5, abs=1e-3)
    line = verdict_sentence(s)
    assert line.startswith("compute-bound (gemm): decode step 10.00 ms; ")
    assert line.endswith(f"; 7 of 19 decode steps ({100 * share:.0f}% of the decode time) run apart: host-bound on "
                         f"rank 0 at {reg['period_ms']:.2f} ms a step")
    assert any(w.startswith("steady state: 7 of 19 decode steps") and "a regime of their own" in w
               for w in s["warnings"])


def test_a_lone_outlier_is_no_regime(tmp_path, ev):
    _, s = _summary(tmp_path, ev, slow_steps=(7,))
    assert s["regimes"] == []
    assert 7 in [x["index"] for x in s["steady_state"]["left_out"]]
    assert "run apart" not in verdict_sentence(s)
