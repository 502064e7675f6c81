"""The answer under real traffic (issue 30): prefills between decode steps, host stalls, steps
annotated twice, and rank files that do not belong to one run.

The traces are made here, two ranks of a TP-2 group, from a plan of steps whose times are known:
each step's host begins it (its CPU annotation), launches its kernels in the first tens of µs,
waits for the GPU in ``cudaStreamSynchronize`` until the GPU window ends, spends 50 µs more
(sampling), and the next step's host begins ``POST_US`` after the window's end. A decode step's
GPU window is four layers of a GEMM and an all-reduce of 14,336 bytes: 2.38 ms; a prefill's is
eight layers with 4 MiB all-reduces: 6.28 ms. Every expected figure below is computed from that
plan, in this file.
"""

from __future__ import annotations

import statistics
from itertools import pairwise

import pytest

from vllm_ops.traces import TraceInputError, summarize
from vllm_ops.traces.cli import main
from vllm_ops.traces.render import verdict_sentence

GEMM = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT"
AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NAMES = {"decode": "execute_context_0(0)_generation_8(8)", "prefill": "execute_context_1(512)_generation_0(0)"}
# phase -> (layers, GEMM µs, all-reduce µs, all-reduce elements (bf16))
SHAPE = {"decode": (4, 585.0, 10.0, 7168), "prefill": (8, 775.0, 10.0, 2 * 1024 * 1024)}
PRE_US, POST_US, SAMPLE_US = 300.0, 200.0, 50.0
# a prefill first, then decode steps with prefills among them (8 decode, 3 prefill)
TRAFFIC = ["prefill", "decode", "decode", "decode", "prefill", "decode", "decode", "decode", "prefill",
           "decode", "decode"]


def _x(cat, name, ts, dur, **args):
    gpu = cat in ("kernel", "gpu_user_annotation")
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 100, "tid": 7 if gpu else 100, "ts": ts,
            "dur": dur, "args": args}


def window_us(phase):
    layers, gemm, ar, _ = SHAPE[phase]
    return layers * (gemm + ar)


def build(plan, t0=1_000_000.0, stall=None, names=None, nested=None, shape=None):
    """Events of one rank and, per step, its CPU start and GPU window (µs). ``stall``: {step: extra
    host µs after its window}; ``names``: phase -> annotation name; ``nested``: phase -> a name
    annotated inside the step's own (CPU and GPU), as SGLang's inside vLLM-style names."""
    names, shape, stall = names or NAMES, shape or SHAPE, stall or {}
    events, truth, t, corr = [], [], t0, 1
    for k, phase in enumerate(plan):
        layers, gemm, ar, nelems = shape[phase]
        w0 = t + PRE_US
        kt = w0
        for _layer in range(layers):
            for name, dur, args in ((GEMM, gemm, {}), (AR, ar, {"In msg nelems": nelems, "dtype": "BFloat16",
                                                            "Process Group Name": "0"})):
                events.append(_x("cuda_runtime", "cudaLaunchKernel", t + 10.0 + 2.0 * (corr % 40), 1.0,
                                 correlation=corr))
                events.append(_x("kernel", name, kt, dur, correlation=corr, **args))
                kt += dur
                corr += 1
        w1 = kt
        events.append(_x("cuda_runtime", "cudaStreamSynchronize", t + 100.0, w1 - (t + 100.0)))
        ext = 500 + k
        events.append(_x("user_annotation", names[phase], t, w1 + SAMPLE_US - t, **{"External id": ext}))
        events.append(_x("gpu_user_annotation", names[phase], w0, w1 - w0, **{"External id": ext}))
        if nested and phase in nested:
            events.append(_x("user_annotation", nested[phase], t + 5.0, w1 - t, **{"External id": 900 + k}))
            events.append(_x("gpu_user_annotation", nested[phase], w0, w1 - w0, **{"External id": 900 + k}))
        truth.append({"phase": phase, "start": t, "w0": w0, "w1": w1})
        t = w1 + POST_US + stall.get(k, 0.0)
    return events, truth


def _periods(truth):
    """Each step's period by the plan: to the next step's start, whatever its phase (µs)."""
    return [b["start"] - a["start"] for a, b in pairwise(truth)] + [None]


@pytest.fixture
def pair(write_trace, tmp_path):
    """write the two ranks of one plan into a directory; returns (directory, truth)."""

    def make(plan, directory="run", **kw):
        truth = None
        for rank in (0, 1):
            events, truth = build(plan, **kw)
            write_trace(f"tp2_rank{rank}.pt.trace.json.gz", events, rank=rank, world_size=2,
                        directory=tmp_path / directory)
        return str(tmp_path / directory), truth

    return make


# ------------------------------------------------------------------ A. steps partition time

def test_a_prefill_between_decode_steps_is_not_decode_host_time(pair):
    d, truth = pair(TRAFFIC)
    s = summarize([d])
    periods = _periods(truth)
    decode_period_us = PRE_US + window_us("decode") + POST_US  # its own host time and window only
    assert decode_period_us == pytest.approx(2880.0)
    for e in s["ranks"]:
        steps = e["steps"]
        assert [st["phase"] for st in steps] == TRAFFIC
        for st, want, tr in zip(steps, periods, truth, strict=True):
            if want is None:
                assert st["period_ms"] is None
                continue
            assert st["period_ms"] == pytest.approx(want / 1000.0, abs=1e-4)
            assert st["window_ms"] == pytest.approx((tr["w1"] - tr["w0"]) / 1000.0, abs=1e-4)
            assert st["host_ms"] == pytest.approx((want - (tr["w1"] - tr["w0"])) / 1000.0, abs=1e-4)
            if st["phase"] == "decode":  # also the ones a prefill follows (steps 3 and 7)
                assert st["period_ms"] == pytest.approx(decode_period_us / 1000.0, abs=1e-4)
                assert st["host_ms"] == pytest.approx((PRE_US + POST_US) / 1000.0, abs=1e-4)
        # the client's view keeps the prefill: decode step 3 to decode step 5
        assert steps[3]["to_next_decode_ms"] == pytest.approx((truth[5]["start"] - truth[3]["start"]) / 1000, abs=1e-4)
        # no decode step is left out and the decomposition holds decode work only
        assert e["steady_steps"] == 8
        assert e["decomposition"]["period_ms"] == pytest.approx(decode_period_us / 1000.0, abs=1e-4)
        assert e["decomposition"]["busy_ms"] == pytest.approx(window_us("decode") / 1000.0, abs=1e-4)
    assert s["steady_state"]["left_out"] == []
    assert s["regimes"] == []
    assert s["verdict"]["kind"] != "host-bound"
    assert "run apart" not in verdict_sentence(s)
    assert f"decode step {decode_period_us / 1000:.2f} ms" in verdict_sentence(s)


def test_the_prefills_are_a_figure_of_their_own(pair):
    d, truth = pair(TRAFFIC)
    s = summarize([d])
    periods = _periods(truth)
    pre = [p for p, tr in zip(periods, truth, strict=True) if tr["phase"] == "prefill" and p is not None]
    dec = [p for p, tr in zip(periods, truth, strict=True) if tr["phase"] == "decode" and p is not None]
    for e in s["ranks"]:
        ph = e["phases"]
        assert set(ph) == {"decode", "prefill"}
        assert ph["prefill"]["steps"] == 3 and ph["decode"]["steps"] == 8
        assert ph["prefill"]["time_ms"] == pytest.approx(sum(pre) / 1000.0, abs=1e-3)
        assert ph["prefill"]["period_ms"] == pytest.approx((PRE_US + window_us("prefill") + POST_US) / 1000, abs=1e-4)
        assert ph["prefill"]["window_ms"] == pytest.approx(window_us("prefill") / 1000.0, abs=1e-4)
        assert ph["prefill"]["time_share"] == pytest.approx(sum(pre) / (sum(pre) + sum(dec)), abs=1e-4)
        assert ph["prefill"]["allreduce_calls"] == SHAPE["prefill"][0]
    assert "3 prefill steps" in verdict_sentence(s)


def test_the_steady_allreduce_table_counts_decode_calls_only(pair):
    d, _truth = pair(TRAFFIC)
    s = summarize([d])
    (g,) = s["collectives"]["groups"]
    layers, _gemm, ar_us, nelems = SHAPE["decode"]
    assert g["over"] == "steady decode steps"
    assert g["calls_per_step"] == layers  # 4, not the prefills' 8
    assert g["calls"] == 8 * layers
    assert g["message_bytes"]["max"] == nelems * 2  # no 4 MiB prefill all-reduce among them
    assert g["calls_all_steps"] == 8 * layers + 3 * SHAPE["prefill"][0]
    # the skew-corrected transfer per decode step: the decode calls' transfer only
    assert s["allreduce"]["ms_per_step_skew_corrected"] == pytest.approx(layers * ar_us / 1000.0, abs=1e-4)


def test_ranks_out_of_lockstep_still_count_decode_calls_only(write_trace, tmp_path):
    """Rank 1 profiled one decode step fewer: the ranks are not in lockstep, and the group's
    figures still hold the decode steps' calls only."""
    for rank, plan in ((0, TRAFFIC), (1, TRAFFIC[:-1])):
        events, _ = build(plan)
        write_trace(f"tp2_rank{rank}.pt.trace.json.gz", events, rank=rank, world_size=2, directory=tmp_path / "r")
    s = summarize([str(tmp_path / "r")])
    (g,) = s["collectives"]["groups"]
    assert g["calls_per_step"] == SHAPE["decode"][0]
    assert g["message_bytes"]["max"] == SHAPE["decode"][3] * 2


# ------------------------------------------------------------------ D. start-up and stalls

def test_the_first_decode_step_after_a_prefill_is_no_start_up(pair):
    d, _ = pair(["prefill"] + ["decode"] * 6)
    s = summarize([d])
    assert s["steady_state"]["left_out"] == []
    assert all(st["steady"] for st in s["ranks"][0]["steps"] if st["phase"] == "decode")


def test_the_first_step_of_the_capture_is_the_start_up(pair):
    d, _ = pair(["decode"] * 6)
    s = summarize([d])
    assert [x["index"] for x in s["steady_state"]["left_out"]] == [0]
    assert s["steady_state"]["left_out"][0]["reason"].startswith("first profiled step")


STALL_STEP, STALL_US = 3, 53_000.0


def test_a_host_stall_is_named_a_stall(pair):
    plan = ["prefill"] + ["decode"] * 7
    d, truth = pair(plan, stall={STALL_STEP: STALL_US})
    s = summarize([d])
    periods = _periods(truth)
    decode = [(k, p, tr) for k, (p, tr) in enumerate(zip(periods, truth, strict=True)) if tr["phase"] == "decode"]
    host = {k: (p - (tr["w1"] - tr["w0"])) / 1000.0 for k, p, tr in decode if p is not None}
    durations = [p if p is not None else tr["w1"] - tr["w0"] for _, p, tr in decode]
    median_host = statistics.median(host.values())
    assert host[STALL_STEP] >= 4 * median_host  # the plan's stall, by the documented rule
    stalls_ = s["stalls"]["steps"]
    assert [(x["rank"], x["index"]) for x in stalls_] == [(0, STALL_STEP), (1, STALL_STEP)]
    for x in stalls_:
        assert x["host_ms"] == pytest.approx(host[STALL_STEP], abs=1e-4)
        assert x["median_host_ms"] == pytest.approx(median_host, abs=1e-4)
        assert x["time_share"] == pytest.approx(host[STALL_STEP] * 1000.0 / sum(durations), abs=1e-4)
    left = {x["index"]: x["reason"] for x in s["steady_state"]["left_out"]}
    assert list(left) == [STALL_STEP]
    assert "host stall" in left[STALL_STEP] and "profiler start-up" not in left[STALL_STEP]
    assert "host stall" in verdict_sentence(s)


def test_a_host_stall_on_the_captures_first_step_is_named_beside_the_start_up(pair):
    plan = ["decode"] * 7
    d, truth = pair(plan, stall={0: STALL_US})
    s = summarize([d])
    periods = _periods(truth)
    host = [(p - (tr["w1"] - tr["w0"])) / 1000.0 for p, tr in zip(periods, truth, strict=True) if p is not None]
    durations = [p if p is not None else tr["w1"] - tr["w0"] for p, tr in zip(periods, truth, strict=True)]
    assert host[0] >= 4 * statistics.median(host) and host[0] * 1000.0 >= statistics.median(periods[:-1])
    stalls_ = s["stalls"]["steps"]
    assert [(x["rank"], x["index"], x["first_in_capture"]) for x in stalls_] == [(0, 0, True), (1, 0, True)]
    for x in stalls_:
        assert x["host_ms"] == pytest.approx(host[0], abs=1e-4)
        assert x["time_share"] == pytest.approx(host[0] * 1000.0 / sum(durations), abs=1e-4)
    (left,) = s["steady_state"]["left_out"]
    assert left["index"] == 0
    assert "profiler start-up" in left["reason"] and "host stall" in left["reason"]
    sentence = verdict_sentence(s)
    assert "host stall in decode step 0 (the capture's first step" in sentence
    assert f"{100 * host[0] * 1000.0 / sum(durations):.0f}% of the decode time" in sentence


# ------------------------------------------------------------------ E. one step annotated twice

def test_a_step_annotated_twice_is_one_step(pair):
    sglang = {"decode": "step[DECODE bs=32]", "prefill": "step[EXTEND bs=1 toks=512]"}
    d, truth = pair(TRAFFIC, nested=sglang)
    s = summarize([d])
    for e in s["ranks"]:
        assert e["decode_steps"] == 8
        assert len(e["steps"]) == len(TRAFFIC)
        for st, tr in zip(e["steps"], truth, strict=True):
            assert st["busy_ms"] == pytest.approx((tr["w1"] - tr["w0"]) / 1000.0, abs=1e-4)
    assert any("lie inside another step annotation" in w for w in s["warnings"])


# ------------------------------------------------------------------ B. files of different runs

def _other_run():
    """The same model shape but another run: 250 s later, 6 layers (6 all-reduces a step)."""
    shape = {"decode": (6, 390.0, 10.0, 4096), "prefill": SHAPE["prefill"]}
    return dict(t0=1_000_000.0 + 250e6, shape=shape)


def test_rank_files_of_different_runs_are_refused(write_trace, tmp_path, capsys):
    d = tmp_path / "mixed"
    events0, _ = build(TRAFFIC)
    events1, _ = build(TRAFFIC, **_other_run())
    f0 = write_trace("tp2_rank0.pt.trace.json.gz", events0, rank=0, world_size=2, directory=d)
    f1 = write_trace("tp2_rank1.pt.trace.json.gz", events1, rank=1, world_size=2, directory=d)
    with pytest.raises(TraceInputError, match="do not belong to one run") as exc:
        summarize([str(d)])
    assert f0 in str(exc.value) and f1 in str(exc.value)
    assert main([str(d)]) == 2
    err = capsys.readouterr().err
    assert f0 in err and f1 in err and "250" in err


def test_rank_files_of_one_time_but_different_steps_are_refused(write_trace, tmp_path):
    """Overlapping in time, but with periods no TP group can show together (2.9 and 21.5 ms)."""
    d = tmp_path / "periods"
    slow = {"decode": (4, 5260.0, 10.0, 7168), "prefill": SHAPE["prefill"]}
    events0, _ = build(TRAFFIC)
    events1, _ = build(TRAFFIC, shape=slow)
    write_trace("tp2_rank0.pt.trace.json.gz", events0, rank=0, world_size=2, directory=d)
    write_trace("tp2_rank1.pt.trace.json.gz", events1, rank=1, world_size=2, directory=d)
    with pytest.raises(TraceInputError, match="period"):
        summarize([str(d)])
