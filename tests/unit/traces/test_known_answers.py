"""The summary against the known answers of the project's own H200 captures (tests/data/traces/known_h200).

Each capture is a small bf16 decoder run step by step under torch.profiler on an H200 by
``known_h200/capture.py``, which planted every step's cause (prefill, mixed and decode steps in a
fixed order, CUDA-graph and eager steps, a host gap and one stall) and measured each step with clocks
the profiler does not use (CUDA events, perf_counter). Every expected figure and every tolerance
here is read from the capture's ``truth.json``, never from the code under test. The traces are never
edited: the one variant (two captures relabelled as two ranks of one group) is derived under
``tmp_path``.

The eager regime, the steady steps, the pace, the bound from arithmetic intensity and the advice
are held to the truth's ``expected`` too; the advice by what the truth says does not fit (its words
are the advisor's, so only what must or must not be named is asserted).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from itertools import pairwise
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, summarize
from vllm_ops.traces.errors import TraceInputError
from vllm_ops.traces.steady import START_UP

KNOWN = Path(__file__).resolve().parents[3] / "tests" / "data" / "traces" / "known_h200"
FULL = ("dense", "moe")  # the captures with prefills, a stall and an eager regime


def _truth(capture: str) -> dict:
    return json.loads((KNOWN / capture / "truth.json").read_text())


def _trace(capture: str) -> Path:
    return KNOWN / capture / _truth(capture)["trace"]["file"]


@pytest.fixture(scope="module")
def known():
    """capture -> (truth, summary of its trace, its rank's step rows)."""
    out = {}
    for capture in ("dense", "moe", "dense_b"):
        s = summarize([str(_trace(capture))], SummaryOptions(jobs=1))
        out[capture] = (_truth(capture), s, s["ranks"][0]["steps"])
    return out


@pytest.mark.parametrize("capture", FULL)
def test_every_step_is_found_with_its_phase_and_tokens(known, capture):
    truth, s, rows = known[capture]
    assert [(r["index"], r["phase"], r["scheduled_tokens"], r["context_tokens"], r["generation_tokens"])
            for r in rows] == [(t["index"], t["phase"], t["scheduled_tokens"], t["context_tokens"],
                                t["generation_tokens"]) for t in truth["steps"]]
    phases = s["ranks"][0]["phases"]
    for phase, want in truth["expected"]["phases"].items():
        assert phases[phase]["steps"] == len(want["steps"])
    assert s["ranks"][0]["decode_steps"] == len(truth["expected"]["phases"]["decode"]["steps"])
    assert phases["mixed"]["decode_token_share"] == pytest.approx(truth["expected"]["mixed_decode_token_share"],
                                                                  abs=1e-4)


@pytest.mark.parametrize("capture", FULL)
def test_decode_figures_hold_no_prefill_work(known, capture):
    """Each step's period is its own (perf_counter t0 to the next step's t0, whatever its phase): the
    decode step before a prefill or mixed step is as long as any other, and the decode figures are
    sums of decode steps alone."""
    truth, s, rows = known[capture]
    tol = truth["tolerances"]["period_ms"]["abs"]
    for t, r in zip(truth["steps"], rows, strict=True):
        if t["period_ms"] is None:
            assert r["period_ms"] is None
        else:
            assert r["period_ms"] == pytest.approx(t["period_ms"], abs=tol), t["index"]
    # among them the decode steps that a prefill or mixed step follows
    assert [t for t, nxt in pairwise(truth["steps"]) if t["phase"] == "decode" and nxt["phase"] != "decode"]
    decode = [t for t in truth["steps"] if t["phase"] == "decode" and t["period_ms"] is not None]
    phases = s["ranks"][0]["phases"]
    assert phases["decode"]["time_ms"] == pytest.approx(sum(t["period_ms"] for t in decode), abs=tol * len(decode))
    for phase in ("prefill", "mixed"):
        mine = [t["period_ms"] for t in truth["steps"] if t["phase"] == phase and t["period_ms"] is not None]
        assert phases[phase]["time_ms"] == pytest.approx(sum(mine), abs=tol * len(mine))
    # the decode kernel time per step is no more than a decode step's whole GPU time: no prefill kernel in it
    assert s["ranks"][0]["cuda_ms_per_step"] <= max(t["gpu_ms"] for t in decode)


@pytest.mark.parametrize("capture", FULL)
def test_the_planted_stall_is_a_stall_on_its_step_not_start_up(known, capture):
    truth, s, rows = known[capture]
    stall = truth["expected"]["stall"]
    assert [(x["rank"], x["index"]) for x in s["stalls"]["steps"]] == [(0, stall["in_period_of_step"])]
    (found,) = s["stalls"]["steps"]
    extra = truth["tolerances"]["stall_host_ms"]["above_measured_gap_max"]
    assert stall["planted_ms"] <= found["host_ms"] <= stall["measured_gap_ms"] + extra
    # the capture's first step is a prefill: the profiler's start-up is there, and no decode step is called it
    first = truth["expected"]["phases"]["decode"]["steps"][0]
    assert rows[0]["phase"] == stall["first_step_of_capture"]["phase"] and rows[0]["first_in_capture"]
    assert not rows[first]["first_in_capture"] and rows[first]["steady"]
    assert not any(START_UP in x["reason"] for x in s["steady_state"]["left_out"])
    assert stall["in_period_of_step"] in {x["index"] for x in s["steady_state"]["left_out"]}


@pytest.mark.parametrize("capture", ("dense", "moe", "dense_b"))
def test_gpu_window_and_busy_against_cuda_events(known, capture):
    truth, _s, rows = known[capture]
    tol = truth["tolerances"]
    need = truth["expected"]["decode"]["gpu_need_ms"]
    for t, r in zip(truth["steps"], rows, strict=True):
        assert t["gpu_ms"] - tol["window_ms"]["below_gpu_ms_max"] <= r["window_ms"], t["index"]
        assert r["window_ms"] <= t["gpu_ms"] + tol["window_ms"]["above_gpu_ms_max"], t["index"]
        assert r["busy_ms"] <= t["gpu_ms"] + tol["busy_ms"]["max_over_gpu_ms"], t["index"]
        if t["phase"] != "decode":
            continue
        # graph steps: the GPU bounds them; eager decode steps run the same kernels as the graph steps
        events = t["gpu_ms"] if t["graph"] else need
        low = tol["busy_ms"]["min_share_of_window_bound"] * (events - tol["window_ms"]["below_gpu_ms_max"])
        assert low <= r["busy_ms"] <= events + tol["busy_ms"]["max_over_gpu_ms"], t["index"]


@pytest.mark.parametrize("capture", FULL)
def test_graph_steps_and_the_planted_host_gaps(known, capture):
    truth, s, rows = known[capture]
    assert [r["index"] for r in rows if r["graph_launches"]] == truth["graphs"]["graph_steps"]
    assert all(r["graph_launches"] == 1 for r in rows if r["graph_launches"])
    assert s["ranks"][0]["graph_launches_without_activity"] == 0
    tol = truth["tolerances"]["host_gap_ms"]["abs"]
    for t, r in zip(truth["steps"], rows, strict=True):
        if t["host_gap_after"] is not None:
            assert r["host_gap_ms"] == pytest.approx(t["host_gap_after"]["measured_ms"], abs=tol), t["index"]


def _as_rank(capture: str, rank: int, directory: Path) -> Path:
    """The capture's trace as rank ``rank`` of a two-rank group (its distributedInfo and file name)."""
    src = _trace(capture)
    doc = json.loads(gzip.decompress(src.read_bytes()))
    info = doc["distributedInfo"]
    info.update(rank=rank, world_size=2)
    info["pg_config"][0].update(pg_size=2, ranks=[0, 1])
    name = src.name.replace("tp0", f"tp{rank}").replace("rank0", f"rank{rank}")
    path = directory / name
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_rank_files_of_two_captures_are_refused(tmp_path):
    """The dense and the MoE capture, more than a minute apart (their truth says when each ran), as
    ranks 0 and 1 of one group: refused, naming both files."""
    dense, moe = _truth("dense"), _truth("moe")
    assert moe["captured"]["started_unix_s"] - dense["captured"]["finished_unix_s"] > 60
    a, b = _as_rank("dense", 0, tmp_path), _as_rank("moe", 1, tmp_path)
    with pytest.raises(TraceInputError, match="do not belong to one run") as err:
        summarize([str(tmp_path)], SummaryOptions(jobs=1))
    assert a.name in str(err.value) and b.name in str(err.value)


def test_rank_files_of_two_captures_seconds_apart_are_refused(tmp_path):
    dense, again = _truth("dense"), _truth("dense_b")
    assert again["captured"]["started_unix_s"] > dense["captured"]["finished_unix_s"]
    assert again["trace"]["trace_id"] != dense["trace"]["trace_id"]
    _as_rank("dense", 0, tmp_path)
    _as_rank("dense_b", 1, tmp_path)
    with pytest.raises(TraceInputError, match=r"do not belong to one run .*time ranges \d+\.\d s apart"):
        summarize([str(tmp_path)], SummaryOptions(jobs=1))


def _capture_script():
    spec = importlib.util.spec_from_file_location("known_h200_capture", KNOWN / "capture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its torch import is optional: the checkpoint writer needs none
    return module


@pytest.mark.parametrize("capture", FULL)
def test_the_ledger_reads_the_bytes_the_capture_held(capture, tmp_path):
    """The capture's model as a checkpoint (headers only): the decode ledger's bytes read at every step
    are the truth's weights outside the routed experts; for the dense model, every weight."""
    truth = _truth(capture)
    model, parts = truth["model"], truth["model"]["parts_bytes"]
    assert _capture_script().write_checkpoint(model, str(tmp_path / "ckpt")) == model["weights_bytes"]
    s = summarize([str(_trace(capture))], SummaryOptions(checkpoint=str(tmp_path / "ckpt"), jobs=1))
    reads = s["ledger"]["ranks"][0]["reads"]
    per_layer = sum(parts.get(k, 0) for k in ("attention_and_norms_per_layer", "mlp_per_layer", "router_per_layer"))
    assert reads["always"] == model["layers"] * per_layer + parts["final_norm"]
    assert reads["lm_head"] == parts["lm_head"]
    assert reads["tokens"] == truth["expected"]["decode"]["tokens_per_step"]
    if model["kind"] == "dense":
        assert reads["weights"] == truth["expected"]["decode"]["weights_bytes_read_per_step"]


@pytest.mark.parametrize("capture", FULL)
def test_the_eager_steps_are_the_regime_and_the_stall_no_part_of_it(known, capture):
    truth, s, _ = known[capture]
    eager = truth["expected"]["eager_regime"]
    assert [r["steps"] for r in s["regimes"]] == [eager["steps"]]
    regime = s["regimes"][0]
    assert regime["graphs"]["cause"] == "eager" and regime["graphs"]["regime"]["graph_steps"] == 0
    assert truth["expected"]["stall"]["after_step"] not in regime["steps"]
    # its advice is the capture sizes, first, not the host's contention
    assert "without CUDA graphs" in regime["verdict"]["next"][0] and "capture sizes" in regime["verdict"]["next"][0]
    assert not any("contention" in n for n in regime["verdict"]["next"])


@pytest.mark.parametrize("capture", FULL)
def test_the_steady_steps_and_the_pace_are_the_graph_steps(known, capture):
    truth, s, rows = known[capture]
    want = truth["expected"]["steady_decode"]
    tol = truth["tolerances"]
    assert [r["index"] for r in rows if r.get("steady")] == want["steps"]
    pace = s["pace"]
    assert pace["bound"] == "gpu" and pace["steady"]
    assert pace["predicted_period_ms"] == pytest.approx(want["period_ms"], abs=tol["period_ms"]["abs"])
    # never below what the GPU measurably needs (the truth's CUDA events, within the window's tolerance)
    need = truth["expected"]["decode"]["gpu_need_ms"]
    assert pace["predicted_period_ms"] >= need - tol["window_ms"]["below_gpu_ms_max"]
    assert pace["ranks"]["0"]["gpu_need_ms_per_step"] == pytest.approx(
        need, abs=tol["window_ms"]["below_gpu_ms_max"])


@pytest.mark.parametrize("capture", FULL)
def test_without_a_checkpoint_the_bound_is_the_gemms_arithmetic_intensity(known, capture):
    truth, s, _ = known[capture]
    decode = truth["expected"]["decode"]
    v = s["verdict"]
    assert v["kind"] == f"{decode['bound']}-bound"
    ev = v["evidence"]
    assert ev["gemm_bound_from"] == "intensity" and ev["tokens_per_step"] == decode["tokens_per_step"]
    # an upper bound of the GEMMs' FLOP per weight byte (the weights' width unknown without a checkpoint),
    # which holds the truth's and still lies far below the ridge
    assert decode["gemm_flop_per_weight_byte"] <= ev["intensity_max_flop_per_byte"] < ev["ridge_flop_per_byte"]


@pytest.mark.parametrize("capture", FULL)
def test_no_advice_the_truth_says_does_not_fit(known, capture):
    _, s, _ = known[capture]
    advice = " ".join(s["verdict"]["next"] + [n for r in s["regimes"] for n in r["verdict"]["next"]])
    # TP1: no all-reduce to fuse or tune; a bf16 model: no Marlin or W4A16 kernels
    for word in ("NCCL", "all-reduce fusion", "Marlin", "W4A16"):
        assert word not in advice, word
    assert "speculative decoding" in advice or "more tokens per step" in advice
