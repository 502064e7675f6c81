"""The real traces in tests/data/traces, checked against plain json.load computations."""

import gzip
import importlib.util
import json
import re
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, summarize
from vllm_ops.traces.reader import read_trace

GPU = ("kernel", "gpu_memcpy", "gpu_memset")
TRACES = Path(__file__).resolve().parents[3] / "tests" / "data" / "traces"
# host calls that put work on a GPU stream (written here, not taken from the reader)
LAUNCH = re.compile(r"(?:cuda|cu|hip)\w*(?:Launch|Memcpy|Memset)")


def _load(path):
    with gzip.open(path) as fh:
        return json.load(fh)


def _by_hand(doc, step_name):
    """Steps, CUDA us, all-reduce durations in start order (inside steps), per rank."""
    events = doc["traceEvents"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "gpu_user_annotation" and e["name"] == step_name]
    inside = [e for e in events if e.get("cat") in GPU and any(a <= e["ts"] < b for a, b in spans)]
    allreduce = sorted((e["ts"], e["dur"]) for e in inside if "AllReduce" in e["name"])
    gemm = sum(e["dur"] for e in inside if e["name"].startswith("nvjet") or "splitKreduce" in e["name"])
    return {"steps": len(spans), "cuda": sum(e["dur"] for e in inside), "gemm": gemm,
            "allreduce": [d for _, d in allreduce], "wall": sum(b - a for a, b in spans)}


@pytest.fixture(scope="module")
def h200():
    d = TRACES / "h200_tp2_decode"
    hand = {r: _by_hand(_load(d / f"tp2_rank{r}.pt.trace.json.gz"), "decode_step") for r in (0, 1)}
    return d, hand, summarize([str(d)], SummaryOptions(decode_pattern="^decode_step$"))


def test_h200_per_rank_figures(h200):
    _, hand, s = h200
    for entry in s["ranks"]:
        h = hand[entry["rank"]]
        assert entry["decode_steps"] == h["steps"] == 12
        assert entry["device"] == "NVIDIA H200"
        assert entry["cuda_ms_per_step"] == pytest.approx(h["cuda"] / 12 / 1000, abs=1e-4)
        share = sum(h["allreduce"]) / h["cuda"]
        assert entry["categories"]["allreduce"]["share"] == pytest.approx(share, abs=1e-4)
        assert entry["categories"]["gemm"]["ms_per_step"] == pytest.approx(h["gemm"] / 12 / 1000, abs=1e-4)
        assert entry["categories"]["other"] == {"ms_per_step": 0.0, "share": 0.0}  # every kernel is classified
        assert entry["allreduce_calls_per_step"] == len(h["allreduce"]) / 12 == 61


def test_h200_shares_match_the_traces_readme(h200):
    _, _, s = h200
    shares = s["allreduce"]["share_by_rank"]
    assert shares["0"] == pytest.approx(0.24, abs=0.01)
    assert shares["1"] == pytest.approx(0.82, abs=0.01)


def test_h200_skew_correction(h200):
    _, hand, s = h200
    a, b = hand[0]["allreduce"], hand[1]["allreduce"]
    mins = [min(x, y) for x, y in zip(a, b, strict=True)]
    ar = s["allreduce"]
    assert ar["calls_matched"] == len(a) == len(b) == 732
    assert ar["ms_per_step_skew_corrected"] == pytest.approx(sum(mins) / 12 / 1000, abs=1e-4)
    assert ar["wait_ms_per_step_by_rank"]["0"] == pytest.approx((sum(a) - sum(mins)) / 12 / 1000, abs=1e-4)
    assert ar["wait_ms_per_step_by_rank"]["1"] == pytest.approx((sum(b) - sum(mins)) / 12 / 1000, abs=1e-4)
    assert ar["nccl_ms_per_step_mean"] == ar["ms_per_step_mean"]
    # the one warning: the steady state leaves out the first step (rank 1's lasts 290 ms)
    (w,) = s["warnings"]
    assert w.startswith("steady state: decode step 0 left out of the steady figures: first profiled step")


def test_h200_default_pattern_finds_no_decode_steps_and_says_why(h200):
    d, _, _ = h200
    s = summarize([str(d)])
    assert all(r["decode_steps"] == 0 for r in s["ranks"])
    assert any("decode_step x12" in w for w in s["warnings"])


def test_b200_prefill_is_classified(real_traces):
    path = real_traces / "public" / "tracelens_b200_vllm_tp8_rank0.json.gz"
    doc = _load(path)
    (span,) = [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
               if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("execute_context_1(")]
    inside = [e for e in doc["traceEvents"] if e.get("cat") in GPU and span[0] <= e["ts"] < span[1]]
    multimem = sum(e["dur"] for e in inside if "multimem_all_reduce" in e["name"])
    bmm = sum(e["dur"] for e in inside if e["name"].startswith("bmm_"))
    s = summarize([str(path)])
    assert s["ranks"][0]["decode_steps"] == 0
    (pre,) = s["prefill"]
    assert pre["prefill_steps"] == 1 and pre["device"] == "NVIDIA B200"
    assert pre["cuda_ms_per_step"] == pytest.approx(sum(e["dur"] for e in inside) / 1000, abs=1e-4)
    cats = pre["categories"]
    assert cats["allreduce"]["ms_per_step"] == pytest.approx(multimem / 1000, abs=1e-4)
    assert pre["allreduce_nccl_ms_per_step"] == 0.0
    assert cats["moe_gemm"]["ms_per_step"] >= bmm / 1000 - 1e-4
    assert (cats.get("other") or {"share": 0.0})["share"] < 0.05
    assert max(cats, key=lambda c: cats[c]["ms_per_step"]) == "moe_gemm"
    assert any("missing: 1-7" in w for w in s["warnings"])
    assert any("execute_context_N(N_N)_generation_N(N) x1" in w for w in s["warnings"])




@pytest.mark.parametrize("name", [
    "h200_tp2_decode/tp2_rank0.pt.trace.json.gz",
    "public/tracelens_b200_vllm_tp8_rank0.json.gz",
    "public/hta_a100_nccl_rank0.json.gz",
    "public/hta_v100_allreduce_rank1.json.gz",
])
def test_parsers_agree(real_traces, name):
    path = real_traces / name
    kwargs = {"decode_pattern": ".", "prefill_pattern": "^$"}
    auto = summarize([str(path)], SummaryOptions(**kwargs))
    general = summarize([str(path)], SummaryOptions(parser="general", **kwargs))
    assert _without(auto, "parser") == _without(general, "parser")




@pytest.mark.parametrize("name", [
    "h200_tp2_decode/tp2_rank0.pt.trace.json.gz",
    "public/tracelens_b200_vllm_tp8_rank0.json.gz",
    "public/hta_a100_nccl_rank0.json.gz",
])
def test_with_every_gpu_annotation_a_step_every_activity_inside_one_is_counted_once(real_traces, name):
    # Each activity that starts inside some GPU annotation belongs to exactly one step (the
    # latest-starting span holding it), so the kernel time of all steps is that of those activities.
    path = real_traces / name
    doc = _load(path)
    acts = [e for e in doc["traceEvents"] if e.get("cat") in GPU]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
    assert spans
    total = sum(e["dur"] for e in acts if any(a <= e["ts"] < b for a, b in spans))
    entry = summarize([str(path)], SummaryOptions(decode_pattern=".", prefill_pattern="^$"))["ranks"][0]
    assert entry["decode_steps"] == len(spans)
    assert entry["cuda_ms_per_step"] * entry["decode_steps"] == pytest.approx(total / 1000, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("name", [
    "h200_tp2_decode/tp2_rank0.pt.trace.json.gz",
    "public/tracelens_b200_vllm_tp8_rank0.json.gz",  # json.dump(indent=4): one key per line
    "public/hta_a100_nccl_rank0.json.gz",
    "public/hta_v100_allreduce_rank1.json.gz",
])
def test_real_traces_take_the_fast_path(real_traces, name):
    assert read_trace(str(real_traces / name), parser="fast").parser == "fast"


def _gen_traces():
    bench = Path(__file__).resolve().parents[3] / "bench" / "gen_traces.py"
    spec = importlib.util.spec_from_file_location("gen_traces", bench)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_h200_relaid_one_key_per_line_reads_fast_and_alike(real_traces, tmp_path):
    """The H200 ranks re-laid as torch 2.13 (vLLM 0.32) writes traces: the same summary, by
    the fast path, as the compact originals and as the general parser on either layout."""
    relayout = _gen_traces().relayout_pretty
    for r in (0, 1):
        src = real_traces / "h200_tp2_decode" / f"tp2_rank{r}.pt.trace.json.gz"
        text = relayout(gzip.decompress(src.read_bytes()))
        assert b'\n    "ph": "X",\n    "cat": "kernel",\n    "name": ' in text
        (tmp_path / src.name).write_bytes(gzip.compress(text, 1))
        assert read_trace(str(tmp_path / src.name), parser="fast").parser == "fast"
    kwargs = {"decode_pattern": "^decode_step$"}
    pretty = summarize([str(tmp_path)], SummaryOptions(**kwargs))
    compact = summarize([str(real_traces / "h200_tp2_decode")], SummaryOptions(**kwargs))
    assert _without(pretty, "file") == _without(compact, "file")
    general = summarize([str(tmp_path)], SummaryOptions(parser="general", **kwargs))
    assert _without(pretty, "file", "parser") == _without(general, "file", "parser")


def _without(summary, *keys):
    """The summary less these keys of each rank entry (which name the file and the parser that read it)."""
    return dict(summary, ranks=[{k: v for k, v in r.items() if k not in keys} for r in summary["ranks"]])


def _union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


@pytest.mark.parametrize("parser", ["general", "auto"])
def test_v100_steps_from_cpu_annotations_by_correlation(real_traces, parser):
    # Only CPU annotations (ProfilerStep#N): each GPU activity belongs to the step whose CPU span
    # holds the launch call with its correlation (the earliest such call).
    path = real_traces / "public" / "hta_v100_allreduce_rank1.json.gz"
    events = _load(path)["traceEvents"]
    assert not any(e.get("cat") == "gpu_user_annotation" for e in events)
    launch = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and LAUNCH.match(e["name"]):
            c = e["args"]["correlation"]
            launch[c] = min(launch.get(c, e["ts"]), e["ts"])
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    inside = [[] for _ in steps]
    for e in events:
        if e.get("cat") in GPU:
            t = launch.get(e["args"].get("correlation"))
            for i, st in enumerate(steps):
                if t is not None and st["ts"] <= t < st["ts"] + st["dur"]:
                    inside[i].append(e)
    s = summarize([str(path)], SummaryOptions(parser=parser))
    r = s["ranks"][0]
    assert r["steps_from"] == "user_annotation" and r["decode_steps"] == len(steps) == 5
    assert any("ProfilerStep#N spans are used as decode steps" in w for w in s["warnings"])
    for row, st, acts in zip(r["steps"], steps, inside, strict=True):
        assert row["name"] == st["name"] and row["activities"] == len(acts) > 0
        assert row["window_ms"] == pytest.approx((max(e["ts"] + e["dur"] for e in acts) -
                                                  min(e["ts"] for e in acts)) / 1000, abs=1e-4)
        assert row["busy_ms"] == pytest.approx(_union([(e["ts"], e["ts"] + e["dur"]) for e in acts]) / 1000, abs=1e-4)
        # the old ncclKernel_AllReduce_RING_LL_Sum_float names are all-reduce
        ar = [e["dur"] for e in acts if e["name"].startswith("ncclKernel_AllReduce")]
        assert row["allreduce_calls"] == len(ar) > 0
        assert row["allreduce_kernel_ms"] == pytest.approx(sum(ar) / 1000, abs=1e-4)
