"""The sandbox's checkpoint (molecule/resources/toy_checkpoint.py over
tests/data/models/h200-tp2-toy-config.json) against the traces the sandbox serves (the stand-in's
re-timed copies of tests/data/traces/h200_tp2_decode): the headers describe the toy decoder those
traces ran, so the ledger sets its kernels against the bytes they read.

Recomputed here from the shapes the config gives (docs/sandbox.md says how they were read from
the traces): per layer an up [28672, 7168] and a down [7168, 28672] projection and a norm [7168],
bf16, 61 layers, TP 2, no attention, no embedding, no LM head; the floor at the H200's spec 4800
GB/s (the sandbox measures no copy).
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, summarize
from vllm_ops_host.checkpoint import read_checkpoint

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "molecule" / "resources" / "toy_checkpoint.py"
CONFIG = REPO / "tests" / "data" / "models" / "h200-tp2-toy-config.json"
TEMPLATES = REPO / "tests" / "data" / "traces" / "h200_tp2_decode"
STANDIN_LIB = REPO / "molecule" / "resources" / "standin" / "lib"
READ = REPO / "tests" / "gpu" / "results" / "ledger_h200_weights.json"
LAYERS, HIDDEN, INTER, TP, SPEC = 61, 7168, 28672, 2, 4800e9


def layer_bytes():
    return (2 * HIDDEN * INTER + HIDDEN) * 2  # up, down and the norm, bf16


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sandbox")
    model = tmp / "kimi-k25-int4"
    model.mkdir()
    shutil.copy(CONFIG, model / "config.json")
    for n in range(1, 65):  # what prepare.yml made before: 64 empty shards, rewritten
        (model / f"model-{n:05d}-of-00064.safetensors").touch()
    first = subprocess.run([sys.executable, str(SCRIPT), str(model), "--shards", "64"], capture_output=True, text=True,
                           check=True)
    again = subprocess.run([sys.executable, str(SCRIPT), str(model), "--shards", "64"], capture_output=True, text=True,
                           check=True)
    sys.path.insert(0, str(STANDIN_LIB))
    try:
        from vllm_standin.traces import load_json_gz, min_ts, retime_template
    finally:
        sys.path.remove(str(STANDIN_LIB))
    traces = tmp / "traces"
    traces.mkdir()
    templates = sorted(TEMPLATES.glob("*.json.gz"))
    loaded = [load_json_gz(str(t)) for t in templates]
    origin = min(min_ts(t) for t in loaded)
    for rank, trace in enumerate(loaded):
        served = retime_template(trace, rank, TP, 1_790_000_000_000_000_000, origin)
        (traces / f"vllm-ops-c1_rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(served).encode()))
    return {"model": model, "traces": traces, "first": first.stdout.strip(), "again": again.stdout.strip()}


def test_the_headers_hold_the_toy_decoder(sandbox):
    assert (sandbox["first"], sandbox["again"]) == ("changed", "unchanged")
    record = read_checkpoint(str(sandbox["model"]))
    assert record["bytes"] == LAYERS * layer_bytes() and record["tensors"] == 3 * LAYERS
    assert len(record["files"]) == 64 and record["parts"]["always"]["bytes"] == record["bytes"]
    assert record["unclassified"]["tensors"] == 0 and record["warnings"] == []
    assert record["model"]["kv"]["layout"] == "none" and record["model"]["kv"]["bytes_per_token"] == 0
    assert record["embedding"]["bytes"] == record["lm_head"]["bytes"] == 0
    # sparse: the disk holds the headers, not 50 GB
    assert sum(p.stat().st_blocks * 512 for p in sandbox["model"].iterdir()) < 64 * 1 << 20


def test_the_served_traces_against_the_sandbox_checkpoint(sandbox):
    plain = summarize([str(sandbox["traces"])], SummaryOptions(context={"tensor_parallel_size": TP}))
    summary = summarize([str(sandbox["traces"])], SummaryOptions(context={"tensor_parallel_size": TP},
                        checkpoint=str(sandbox["model"])))
    floor_ms = LAYERS * layer_bytes() / TP / SPEC * 1e3
    for rank, led in zip(summary["ranks"], summary["ledger"]["ranks"], strict=True):
        gemm = rank["decomposition"]["compute_ms"]["gemm"]
        assert led["reads"]["tokens"] == 1  # the stand-in names the steps as vLLM does: one decode request
        assert led["floors"]["weights"] == pytest.approx(floor_ms, abs=1e-4)
        assert led["bandwidth"]["source"] == "spec" and led["floors"]["kv_cache"] == 0.0
        assert led["gemm"]["hbm_share"] == pytest.approx(floor_ms / gemm, abs=1e-3)
        assert led["gemm"]["kind"] == "memory-bound" and 0.8 < led["gemm"]["hbm_share"] < 0.9
        assert led["floors"]["allreduce"] is None  # no all-reduce floor on the sandbox's GPUs
    # today's verdict, saying more: host-bound on rank 1, its GEMMs memory-bound at their share
    v = summary["verdict"]
    assert (v["kind"], v["rank"]) == (plain["verdict"]["kind"], plain["verdict"]["rank"]) == ("host-bound", 1)
    assert v["evidence"]["gemm_kind"] == "memory-bound"
    assert v["next"][:len(plain["verdict"]["next"])] == plain["verdict"]["next"]
    assert summary["ranks"] == plain["ranks"]


def test_each_gemm_kernel_reads_at_what_an_h200_reads(sandbox):
    # The toy's sizes are right if its GEMM kernels, reading one rank's half of a projection each, move
    # bytes as fast as an H200 reads memory: torch.sum over 4 GiB on the H200 of tests/gpu/results.
    read_gbps = json.loads(READ.read_text())["read_reference"]["read_gbps"]
    with gzip.open(TEMPLATES / "tp2_rank0.pt.trace.json.gz", "rt") as fh:
        events = json.load(fh)["traceEvents"]
    per_kernel = HIDDEN * INTER // TP * 2  # one projection's rows (or columns) on one rank, bf16
    for name in ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT", "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_splitK_NNT"):
        median_us = statistics.median(e["dur"] for e in events if e.get("cat") == "kernel" and e["name"] == name)
        gbps = per_kernel / (median_us * 1e-6) / 1e9
        assert gbps == pytest.approx(read_gbps, rel=0.1), (name, gbps)
