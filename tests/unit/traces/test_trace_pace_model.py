"""The pace model against the page (issue 30, point 5 and "Why" 8): a predicted period never below
what the GPU measurably needs, the rest of the period said, and every figure the page shows in two
places computed once.

The traces are made here from a plan whose times are known. ``_async_plan``: one GPU, a host that
issues a step every ``HOST_US`` without waiting for the GPU (so it runs ahead, its lead growing),
and a GPU whose window holds ``KERNELS`` kernels of ``KERNEL_US`` with ``GAP_US`` idle between
them, every kernel launched long before it starts (that idle is not the host's). Every expected
figure is computed from the plan, in this file.
"""

from __future__ import annotations

import statistics
from itertools import pairwise

import pytest
import test_trace_traffic
from test_trace_traffic import POST_US, PRE_US, TRAFFIC, build, window_us

from vllm_ops.traces import summarize, to_markdown
from vllm_ops.traces.render import verdict_sentence

GEMM = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT"
DECODE = "execute_context_0(0)_generation_1(1)"
HOST_US, KERNELS, KERNEL_US, GAP_US, STEPS = 2070.0, 10, 180.0, 570.0 / 9, 12


def _x(cat, name, ts, dur, **args):
    gpu = cat in ("kernel", "gpu_user_annotation")
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 100, "tid": 7 if gpu else 100, "ts": ts,
            "dur": dur, "args": args}


def _async_plan(t0=1_000_000.0):
    events, windows, end, corr = [], [], None, 1
    for k in range(STEPS):
        start = t0 + k * HOST_US
        w0 = max(end or 0.0, start + 20.0)
        for i in range(KERNELS):
            events.append(_x("cuda_runtime", "cudaLaunchKernel", start + 5.0 + i, 0.5, correlation=corr))
            events.append(_x("kernel", GEMM, w0 + i * (KERNEL_US + GAP_US), KERNEL_US, correlation=corr))
            corr += 1
        end = w0 + KERNELS * KERNEL_US + (KERNELS - 1) * GAP_US
        events.append(_x("user_annotation", DECODE, start, HOST_US - 20.0, **{"External id": 100 + k}))
        events.append(_x("gpu_user_annotation", DECODE, w0, end - w0, **{"External id": 100 + k}))
        windows.append((w0, end))
    return events, windows


def test_the_predicted_period_is_never_below_what_the_gpu_needs(write_trace):
    events, windows = _async_plan()
    s = summarize([write_trace("rank0.pt.trace.json.gz", events)])
    window = KERNELS * KERNEL_US + (KERNELS - 1) * GAP_US  # the GPU's need: all of its idle is its own
    busy = KERNELS * KERNEL_US
    assert busy < HOST_US < window  # the host needs more than the GPU's work, less than its window
    p = s["pace"]
    r0 = p["ranks"]["0"]
    assert r0["gpu_ms_per_step"] == pytest.approx(busy / 1000, abs=1e-4)
    assert r0["gpu_need_ms_per_step"] == pytest.approx(window / 1000, abs=1e-4)
    assert r0["host_ms_per_step"] == pytest.approx(HOST_US / 1000, abs=1e-4)
    # the host runs ahead by window - HOST_US more every step: the capture is not steady
    assert r0["lead_change_ms"] == pytest.approx((window - HOST_US) * (STEPS - 2) / 1000, abs=1e-3)
    assert p["steady"] is False
    # so the run drifts to the GPU's need, not to the host's 2.07 ms
    assert (p["limit"], p["bound"]) == (0, "gpu")
    assert p["predicted_period_ms"] == pytest.approx(window / 1000, abs=1e-4)
    periods = [b[0] - a[0] for a, b in pairwise(windows[1:])]
    assert p["predicted_period_ms"] >= statistics.median(periods) / 1000 - 1e-4
    assert s["verdict"]["kind"] != "host-bound"
    assert f"drifting to {window / 1000:.2f} ms (rank 0's gpu)" in verdict_sentence(s)
    text = to_markdown(s)
    assert f"set by rank 0's GPU: it needs {window / 1000:.3f} ms a step" in text
    assert f"drifts towards {window / 1000:.3f} ms a step" in text


def two_ranks(write_trace, tmp_path, plan, directory="run", **kw):
    """The two ranks of a TP-2 group, each built from ``plan`` (test_trace_traffic's builder)."""
    for rank in (0, 1):
        events, _ = build(plan, **kw)
        write_trace(f"tp2_rank{rank}.pt.trace.json.gz", events, rank=rank, world_size=2, directory=tmp_path / directory)
    return str(tmp_path / directory)


def test_a_steady_capture_keeps_its_period_and_the_rest_is_said(write_trace, tmp_path):
    """Host and GPU in turn (the host waits for the GPU, then samples and schedules): the GPU needs
    its window, and the period holds PRE_US + POST_US of it waiting for the host."""
    s = summarize([two_ranks(write_trace, tmp_path, TRAFFIC)])
    p = s["pace"]
    period = (PRE_US + window_us("decode") + POST_US) / 1000
    assert p["steady"] is True
    assert p["ranks"]["0"]["gpu_need_ms_per_step"] == pytest.approx(window_us("decode") / 1000, abs=1e-4)
    assert p["predicted_period_ms"] == pytest.approx(period, abs=1e-4)  # not the need, 2.38 ms
    waits = p["ranks"]["0"]["gpu_waits"]
    assert waits["for_host_between_steps_ms"] == pytest.approx((PRE_US + POST_US) / 1000, abs=1e-4)
    assert waits["total_ms"] == pytest.approx(period - window_us("decode") / 1000, abs=1e-4)
    text = to_markdown(s)
    assert f"the capture is steady at {period:.3f} ms a step" in text
    assert f"is its GPU waiting, {(PRE_US + POST_US) / 1000:.3f} ms a step: " in text
    assert f"{(PRE_US + POST_US) / 1000:.3f} ms for its host between steps" in text


def test_one_rank_of_a_group_says_no_waiting_and_no_last_arriver(write_trace, tmp_path):
    """Only rank 1 of the TP-2 pair: its calls cannot be split into transfer and waiting, and it
    is the last arriver of nothing (issue 30, "Why" 8: "all-reduce waiting 0.000" and "last
    arriver rank 1 (100.0%)" were printed)."""
    events, _ = build(TRAFFIC)
    d = tmp_path / "one"
    write_trace("tp2_rank1.pt.trace.json.gz", events, rank=1, world_size=2, directory=d)
    s = summarize([str(d)])
    (g,) = s["collectives"]["groups"]
    assert g["told_apart"] is False and g["last_arriver_share"] == {} and g["skew_us"] is None
    assert g["busbw_gbps"] is None
    e = s["ranks"][0]
    layers, _gemm, ar_us, _ = test_trace_traffic.SHAPE["decode"]
    assert e["decomposition"]["allreduce_wait_ms"] is None
    assert e["decomposition"]["allreduce_transfer_ms"] == pytest.approx(layers * ar_us / 1000, abs=1e-4)
    assert all(st["allreduce_wait_ms"] is None for st in e["steps"])
    assert s["collectives"]["by_rank"]["1"]["wait_ms_per_step"] is None
    assert s["allreduce"]["wait_ms_per_step_by_rank"] == {"1": None}
    text = to_markdown(s)
    assert "(100.0%)" not in text and "| rank 1 (" not in text
    assert "| all-reduce waiting for other ranks | - |" in text
    assert "| all-reduce waiting | -, - (-) |" in text
    assert "Waiting per steady step: rank 1 not measured" in text
    assert "waiting for other ranks, ms per step | 0.000" not in text
