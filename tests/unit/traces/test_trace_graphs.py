"""Eager steps against CUDA-graph steps (issue 30, point 4): a regime of steps that launched no
graph, after steps that ran in graphs, is "these steps ran without CUDA graphs", with the capture
sizes as advice, never CPU contention.

The trace is made here (one GPU): ``GRAPH_STEPS`` decode steps of batch 8, each one
``cudaGraphLaunch`` whose ``KERNELS`` kernels carry its correlation and run back to back; then
``EAGER_STEPS`` of batch 48, whose host launches the same kernels one by one ``LAUNCH_US`` apart,
so the GPU waits for each launch.
"""

from __future__ import annotations

import pytest

from vllm_ops.traces import summarize, to_markdown
from vllm_ops.traces.render import verdict_sentence

GEMM = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT"
KERNELS, KERNEL_US, LAUNCH_US, GRAPH_STEPS, EAGER_STEPS = 20, 100.0, 300.0, 10, 4


def _x(cat, name, ts, dur, **args):
    gpu = cat in ("kernel", "gpu_user_annotation")
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 100, "tid": 7 if gpu else 100, "ts": ts,
            "dur": dur, "args": args}


def _trace():
    events, t, corr = [], 1_000_000.0, 1
    for k in range(GRAPH_STEPS + EAGER_STEPS):
        eager = k >= GRAPH_STEPS
        batch = 48 if eager else 8
        name = f"execute_context_0(0)_generation_{batch}({batch})"
        w0 = t + 40.0 if eager else t + 50.0  # the first kernel's start
        if not eager:
            events.append(_x("cuda_runtime", "cudaGraphLaunch", t + 10.0, 5.0, correlation=corr))
        for i in range(KERNELS):
            ts = (t + 20.0 + i * LAUNCH_US + 20.0) if eager else w0 + i * KERNEL_US
            if eager:
                events.append(_x("cuda_runtime", "cudaLaunchKernel", ts - 20.0, 5.0, correlation=corr))
            events.append(_x("kernel", GEMM, ts, KERNEL_US, correlation=corr))
            corr += 1 if eager else 0
        corr += 0 if eager else 1
        w1 = ts + KERNEL_US
        events.append(_x("user_annotation", name, t, w1 - t, **{"External id": 100 + k}))
        events.append(_x("gpu_user_annotation", name, w0, w1 - w0, **{"External id": 100 + k}))
        t = w1 + 100.0
    return events


def test_eager_steps_after_graph_steps_are_said_to_run_without_graphs(write_trace):
    s = summarize([write_trace("rank0.pt.trace.json.gz", _trace())])
    steps = [st for st in s["ranks"][0]["steps"] if st["phase"] == "decode"]
    assert [st["graph_launches"] for st in steps] == [1] * GRAPH_STEPS + [0] * EAGER_STEPS
    (reg,) = s["regimes"]
    assert reg["steps"] == list(range(GRAPH_STEPS, GRAPH_STEPS + EAGER_STEPS)) and reg["side"] == "slower"
    g = reg["graphs"]
    assert (g["cause"], g["regime"]["mode"], g["steady"]["mode"], g["batch_sizes"]) == ("eager", "eager", "graphs",
                                                                                        [48])
    assert g["regime"]["launches_per_step"] == 0 and g["steady"]["launches_per_step"] == pytest.approx(1.0)
    nxt = reg["verdict"]["next"]
    assert nxt[0].startswith("these steps ran without CUDA graphs while the steady ones ran in graphs: make the "
                             "capture sizes cover their batch size (48)")
    assert not any("contention" in x or "CPU" in x for x in nxt)
    line = verdict_sentence(s)
    assert f"{EAGER_STEPS} of {GRAPH_STEPS + EAGER_STEPS} decode steps" in line
    assert "run apart without CUDA graphs (0 graph launches a step; the steady steps 1.0)" in line
    assert "ran without CUDA graphs" in to_markdown(s)
