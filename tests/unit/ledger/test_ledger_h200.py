"""The decode ledger over a real H200 trace (tests/gpu/results, made by tests/gpu/run_ledger_check.py):
a batch-1 decode step of bf16 GEMVs whose weights the test knows from the run's weights.json, and the
bandwidth the H200's device-to-device copy measured in allreduce_bench's JSON. The floor and the
GEMMs' share of the bandwidth are recomputed here from those files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from vllm_ops.ledger import decode_ledger, describe, load_checkpoint
from vllm_ops.traces import summarize

from ledger_helpers import write_safetensors

RESULTS = Path(__file__).resolve().parents[2] / "gpu" / "results"


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    run = json.loads((RESULTS / "ledger_h200_weights.json").read_text())
    model = tmp_path_factory.mktemp("h200") / "model"
    model.mkdir()
    write_safetensors(model / "model.safetensors", [(name, run["dtype"], shape) for name, shape in run["tensors"]])
    (model / "config.json").write_text(json.dumps(run["config"]))
    summary = summarize([str(RESULTS / "ledger_h200_decode_rank0.pt.trace.json.gz")])
    return run, load_checkpoint(model), summary


def test_the_gemms_of_a_real_h200_decode_step_against_their_weights(h200):
    run, checkpoint, summary = h200
    floor = json.loads((RESULTS / "allreduce_h200_ws1_copy.json").read_text())
    ledger = decode_ledger(summary, checkpoint, allreduce_floor=floor, key_tokens=0, tensor_parallel_size=1)
    (rank,) = ledger["ranks"]

    # every tensor once, but only the one embedding row of the step's one token (bf16)
    hidden = run["config"]["hidden_size"]
    read = sum(math.prod(shape) * 2 for name, shape in run["tensors"] if "embed_tokens" not in name) + hidden * 2
    copy = floor["device_copy"]
    gbps = 2 * copy["bytes"] / (copy["median_us"] * 1e-6) / 1e9  # read + written per second
    floor_ms = read / (gbps * 1e9) * 1e3
    gemm_ms = sum(summary["ranks"][0]["decomposition"]["compute_ms"].get(c, 0.0) for c in ("gemm", "moe_gemm"))

    assert rank["reads"]["weights"] == read and rank["reads"]["tokens"] == 1  # from the step's annotation
    assert rank["bandwidth"]["source"] == "measured" and rank["bandwidth"]["gbps"] == pytest.approx(gbps, rel=1e-4)
    assert rank["floors"]["weights"] == pytest.approx(floor_ms, abs=1e-3)
    assert rank["gemm"]["hbm_share"] == pytest.approx(floor_ms / gemm_ms, abs=1e-3)
    assert rank["gemm"]["kind"] == "memory-bound"
    assert rank["floors"]["total"] == rank["floors"]["weights"]  # no KV, no all-reduce in this step
    assert rank["headroom_ms"] == pytest.approx(summary["ranks"][0]["decomposition"]["period_ms"] - floor_ms,
                                                abs=1e-3)
    # eager launches under the profiler: the GPU waits for the host more than for its memory
    assert rank["levers"][0]["part"] == "gpu_idle"
    assert f"GEMMs at {100 * floor_ms / gemm_ms:.0f}% of HBM bandwidth" in describe(rank)


def test_with_the_spec_figure_the_share_is_lower(h200):
    _, checkpoint, summary = h200
    spec = decode_ledger(summary, checkpoint, key_tokens=0, tensor_parallel_size=1)["ranks"][0]
    measured = decode_ledger(summary, checkpoint, key_tokens=0, tensor_parallel_size=1,
                             allreduce_floor=RESULTS / "allreduce_h200_ws1_copy.json")["ranks"][0]
    assert spec["bandwidth"]["source"] == "spec" and spec["bandwidth"]["gbps"] == 4800.0
    assert spec["gemm"]["hbm_share"] < measured["gemm"]["hbm_share"]
