"""What the summary says when the traces are not what it expects (issue 20, points 4 and 5): a
training loop's ProfilerStep trace, a vLLM trace with prefill steps only, mixed prefill+decode
steps, a ROCm trace, SGLang's step names. The traces are made here; the expected counts, token
shares and GPU time come from the events as written, computed in the test.
"""

from __future__ import annotations

import gzip
import shlex

import pytest

from vllm_ops.traces import SummaryOptions, summarize
from vllm_ops.traces.annotations import parse_step_name
from vllm_ops.traces.render import to_markdown, verdict_sentence

GEMM = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT"
KERNELS, KERNEL_US, STEP_US, CPU_US = 5, 900.0, 10_000.0, 9_000.0


def _x(cat, name, ts, dur, **args):
    gpu = cat in ("kernel", "gpu_user_annotation")
    return {"ph": "X", "cat": cat, "name": name, "pid": 0 if gpu else 100, "tid": 7 if gpu else 100, "ts": ts,
            "dur": dur, "args": args}


def _steps(names, launch="cudaLaunchKernel", gpu_spans=True, kernel_corr=0, t0=0.0):
    """One step per name, STEP_US apart: a CPU annotation, KERNELS launches and their kernels
    (1 ms apart; ``kernel_corr`` shifts the kernels' correlations away from their launches)."""
    events, t, corr = [], t0, 1
    for k, name in enumerate(names):
        events.append(_x("user_annotation", name, t, CPU_US, **{"External id": 100 + k}))
        for i in range(KERNELS):
            events.append(_x("cuda_runtime", launch, t + 10 + 100 * i, 5.0, correlation=corr))
            events.append(_x("kernel", GEMM, t + 50 + 1000 * i, KERNEL_US, correlation=corr + kernel_corr))
            corr += 1
        if gpu_spans:
            events.append(_x("gpu_user_annotation", name, t + 50, 1000 * (KERNELS - 1) + KERNEL_US,
                             **{"External id": 100 + k}))
        t += STEP_US
    return events


def _write(path, events, ev, world=1, rank=0, **top):
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": ""}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}, **top, "traceEvents": events}
    path.write_bytes(gzip.compress(ev.render(doc).encode()))
    return str(path)


# ----------------------------------------------------------------- 4. not vLLM's, or vLLM's prefill

def test_a_profilerstep_training_trace_gets_figures_and_no_vllm_advice(tmp_path, ev):
    path = _write(tmp_path / "train_rank0.pt.trace.json.gz",
                  _steps([f"ProfilerStep#{k}" for k in range(6)], gpu_spans=False), ev)
    s = summarize([path])
    assert s["decode_pattern"] == r"^ProfilerStep#\d+$" and s["context"]["engine"] is None
    v = s["verdict"]
    assert v["kind"] == "inconclusive" and v["next"] == []
    assert v["reason"].startswith("not an inference engine's trace: its steps are ProfilerStep#N spans")
    # the figures are given: each step's period is STEP_US, its GPU busy KERNELS x KERNEL_US
    assert v["evidence"]["period_ms"] == pytest.approx(STEP_US / 1000.0)
    assert v["evidence"]["busy_ms"] == pytest.approx(KERNELS * KERNEL_US / 1000.0)
    text = to_markdown(s)
    assert "--enforce-eager" not in text and "async-scheduling" not in text
    assert any("ProfilerStep#N spans are used" in w and "no engine advice" in w for w in s["warnings"])


@pytest.mark.parametrize("name", ["public/hta_a100_nccl_rank0.json.gz", "public/hta_v100_allreduce_rank1.json.gz"])
def test_the_public_training_traces_get_no_vllm_advice(real_traces, name):
    s = summarize([str(real_traces / name)])
    assert s["context"]["engine"] is None
    text = to_markdown(s)
    assert "--enforce-eager" not in text and "async-scheduling" not in text and "NCCL sweep" not in text
    assert s["verdict"]["kind"] in ("inconclusive", "partial")


def test_a_vllm_trace_with_prefill_steps_never_falls_back_to_profiler_steps(tmp_path, ev):
    # ProfilerStep#N spans hold the engine's steps; the engine's only step here is a prefill one
    events = _steps([f"ProfilerStep#{k}" for k in range(3)], gpu_spans=False)
    prefill = "execute_context_1(50)_generation_0(0)"
    events.append(_x("user_annotation", prefill, 100.0, 5000.0, **{"External id": 7}))
    s = summarize([_write(tmp_path / "v_rank0.pt.trace.json.gz", events, ev)])
    assert s["decode_pattern"] != r"^ProfilerStep#\d+$"
    assert s["ranks"][0]["decode_steps"] == 0 and s["context"]["engine"] == "vllm"
    assert s["verdict"]["reason"] == f"no decode steps: the capture holds only prefill steps (1: {prefill})"


def test_phase_names_keep_profiler_steps_out_and_the_pattern_is_suggested(tmp_path, ev):
    events = _steps([f"ProfilerStep#{k}" for k in range(3)], gpu_spans=False)
    events += [_x("user_annotation", "decode_step", 100.0 + STEP_US * k, 5000.0, **{"External id": 70 + k})
               for k in range(3)]
    path = _write(tmp_path / "c_rank0.pt.trace.json.gz", events, ev)
    s = summarize([path])
    assert s["ranks"][0]["decode_steps"] == 0
    assert s["warnings"][0].startswith("ProfilerStep#N spans are not used as decode steps: the annotations name "
                                       "phases (decode_step)")
    assert s["verdict"]["next"] == [f"name the decode steps: vllm-trace-summary {shlex.quote(path)} "
                                    "--decode-pattern '^decode_step$'"]
    assert summarize([path], SummaryOptions(decode_pattern="^decode_step$"))["ranks"][0]["decode_steps"] == 3


# ----------------------------------------------------------------- 5. messages that name what was found

def test_mixed_steps_are_reported_as_mixed_with_their_decode_share(tmp_path, ev):
    names = [f"execute_context_1({c})_generation_{g}({g})" for c, g in ((100, 8), (120, 7), (90, 9), (110, 8),
                                                                       (100, 5))]
    path = _write(tmp_path / "m_rank0.pt.trace.json.gz", _steps(names), ev)
    s = summarize([path])
    decode_requests = sum(parse_step_name(n).generation_requests for n in names)
    prefill_requests = sum(parse_step_name(n).context_requests for n in names)
    gen = sum(int(n.split("_generation_")[1].split("(")[0]) for n in names)
    ctx = sum(int(n.split("(")[1].split(")")[0]) for n in names)
    gpu_ms = len(names) * KERNELS * KERNEL_US / 1000.0
    v = s["verdict"]
    assert v["kind"] == "inconclusive"
    assert v["reason"] == (f"no decode-only steps: 5 mixed steps (prefill and decode requests in one step) hold the "
                           f"decode work: {decode_requests} decode requests beside {prefill_requests} prefill "
                           f"requests, {gpu_ms:.0f} ms of GPU work, decode {100 * gen / (gen + ctx):.0f}% of their "
                           "tokens")
    assert "CUDA activities" not in " ".join(v["next"])
    assert v["next"][0] == (f"judge the mixed steps as steps: vllm-trace-summary {shlex.quote(path)} "
                            "--decode-pattern '_generation_[1-9]'")
    assert f"the mixed ones holding {decode_requests} decode requests" in s["warnings"][0]
    # the command it gives judges them
    judged = summarize([path], SummaryOptions(decode_pattern="_generation_[1-9]"))
    assert judged["ranks"][0]["decode_steps"] == 5 and judged["verdict"]["kind"] != "inconclusive"


def test_a_rocm_trace_is_told_about_hip_not_cuda_graphs(tmp_path, ev):
    # CPU annotations only (as on ROCm), hipLaunchKernel, and kernels whose correlation no launch carries
    events = _steps(["execute_context_0(0)_generation_1(1)"] * 4, launch="hipLaunchKernel", gpu_spans=False,
                    kernel_corr=1000)
    s = summarize([_write(tmp_path / "rocm_rank0.pt.trace.json.gz", events, ev)])
    assert s["context"]["api"] == "HIP"
    v = s["verdict"]
    assert v["reason"] == "4 decode steps, but no GPU activity starts inside them"
    assert "HIP" in v["next"][0] and "CUDA graphs" not in v["next"][0]


def test_hip_graph_launches_without_kernels_are_called_hip_graphs(tmp_path, ev):
    events = _steps(["execute_context_0(0)_generation_1(1)"] * 4, launch="hipLaunchKernel")
    events.append(_x("cuda_runtime", "hipGraphLaunch", 20.0, 5.0, correlation=999))
    s = summarize([_write(tmp_path / "rocm_rank0.pt.trace.json.gz", events, ev)])
    (w,) = [w for w in s["warnings"] if "GraphLaunch" in w]
    assert "1 of 1 hipGraphLaunch calls" in w and "HIP graphs" in w and "CUDA" not in w
    assert s["verdict"]["reason"].startswith("HIP graph launches without recorded kernels")


@pytest.mark.parametrize(("name", "phase", "context", "generation", "tokens"), [
    ("step[DECODE bs=4]", "decode", 0, 4, 4),
    ("step[DECODE bs=64 g_sq=128 g_sqsq=256 g_sqsk=262144 g_sk=131072]", "decode", 0, 64, 128),
    ("step[EXTEND bs=2 toks=14721]", "prefill", 2, 0, 14721),
    ("step[MIXED bs=2 c=1 g=1 c_sq=5 c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]", "mixed", 1, 1, 6),
])
def test_sglang_step_names(name, phase, context, generation, tokens):
    p = parse_step_name(name)
    assert (p.family, p.phase, p.context_requests, p.generation_requests, p.scheduled_tokens) == (
        "sglang", phase, context, generation, tokens)


def test_sglang_decode_steps_are_found_and_advised_in_sglang_s_terms(tmp_path, ev):
    s = summarize([_write(tmp_path / "sgl_rank0.pt.trace.json.gz", _steps(["step[DECODE bs=4]"] * 6), ev)])
    r = s["ranks"][0]
    assert r["decode_steps"] == 6 and {st["family"] for st in r["steps"]} == {"sglang"}
    assert r["by_batch_size"]["4"]["steps"] == 6 and s["context"]["engine"] == "sglang"
    v = s["verdict"]
    assert v["kind"] == "host-bound"  # the host takes CPU_US + the gap of each STEP_US, the GPU 4.5 ms
    assert v["evidence"]["host_ms_per_step"] == pytest.approx(STEP_US / 1000.0, abs=1e-3)
    text = " ".join(v["next"])
    assert "--disable-cuda-graph" in text and "--enforce-eager" not in text


def test_the_hint_with_the_names_seen_comes_first(real_traces):
    s = summarize([str(real_traces / "h200_tp2_decode")])
    assert s["warnings"][0].startswith("rank 0 (tp2_rank0.pt.trace.json.gz): no decode steps match")
    assert "(try --decode-pattern '^decode_step$')" in s["warnings"][0] and "decode_step x12" in s["warnings"][0]
    assert s["verdict"]["next"][0].endswith("--decode-pattern '^decode_step$'")
    assert verdict_sentence(s).startswith("inconclusive: no decode steps match")
