"""The all-reduce floor beside the trace's transfer: the summary and the verdict (the floor itself, its
reader and its command: tests/unit/allreduce_bench/test_floor.py)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, summarize, to_markdown
from vllm_ops.traces.verdict import advise

H200 = Path(__file__).resolve().parents[2] / "data" / "traces" / "h200_tp2_decode"


def _floor(world=2, sizes=((1024, 5.0), (16384, 8.0), (1048576, 40.0))):
    return {"tool": "allreduce_bench", "schema": 1, "world_size": world, "backend": "nccl", "nccl_version": "2.28.9",
            "gpu_name": "NVIDIA H200", "timing": "CUDA graph", "environment": {"NCCL_PROTO": "LL"},
            "sizes": [{"bytes": b, "median_us": us} for b, us in sizes]}


def _transfers():
    """The k-th all-reduce of each rank is one collective; its transfer is the shorter duration.
    Steady steps 1-11 (step 0 is left out); returned in µs."""
    import gzip

    calls = []
    for r in (0, 1):
        with gzip.open(H200 / f"tp2_rank{r}.pt.trace.json.gz") as fh:
            doc = json.load(fh)
        ev = doc["traceEvents"]
        steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                       if e.get("cat") == "gpu_user_annotation" and e["name"] == "decode_step")
        calls.append(sorted((e["ts"], e["dur"], next(k for k, (a, b) in enumerate(steps) if a <= e["ts"] < b))
                            for e in ev if e.get("cat") == "kernel" and "AllReduce" in e["name"]))
    return [min(a[1], b[1]) for a, b in zip(*calls, strict=True) if a[2] != 0]


def test_the_summary_sets_the_floor_beside_the_transfer(tmp_path):
    path = tmp_path / "floor.json"
    path.write_text(json.dumps(_floor()))
    s = summarize([str(H200)], SummaryOptions(decode_pattern="^decode_step$", allreduce_floor=str(path)))
    (g,) = s["collectives"]["groups"]
    t = (math.log(14336) - math.log(1024)) / (math.log(16384) - math.log(1024))
    want_floor = math.exp(math.log(5.0) + t * (math.log(8.0) - math.log(5.0)))
    assert g["floor_us"] == pytest.approx(want_floor, abs=1e-3) and g["floor_how"] == "interpolated"
    assert g["floor_ratio"] == pytest.approx(statistics.median(_transfers()) / want_floor, abs=1e-3)
    assert s["verdict"]["evidence"]["allreduce_floor_ratio"] == g["floor_ratio"]
    assert s["allreduce_floor"]["source"] == str(path) and s["allreduce_floor"]["world_size"] == 2
    text = to_markdown(s)
    assert f"| {g['floor_us']:.3f} ({g['floor_ratio']:.2f}x) |" in text and f"Floor: `{path}`, measured with 2" in text


def test_a_floor_of_another_size_is_not_used_and_the_summary_says_why():
    s = summarize([str(H200)], SummaryOptions(decode_pattern="^decode_step$", allreduce_floor=_floor(world=1)))
    (g,) = s["collectives"]["groups"]
    assert g["floor_us"] is None and "one rank" in g["floor_note"]
    assert any("not used for group 0" in w for w in s["warnings"])
    assert s["verdict"]["evidence"]["allreduce_floor_ratio"] is None


def test_the_advice_for_communication_bound_reads_the_floor():
    base = {"kind": "communication-bound", "rank": None, "category": None}
    pcie8 = {"interconnect": "pcie", "tensor_parallel_size": 8}
    at = advise(dict(base, evidence={"allreduce_floor_ratio": 1.1}), pcie8)
    assert "already runs at the host's measured floor (1.10x)" in at[0] and "fewer ranks" in at[1]
    above = advise(dict(base, evidence={"allreduce_floor_ratio": 2.4}), {"interconnect": "pcie"})
    assert "2.4x above the host's measured floor" in above[0] and "NCCL sweep" in above[0]
    unknown = advise(dict(base, evidence={}), pcie8)
    assert "an NCCL sweep on PCIe" in unknown[0] and "TP 4 x 2 replicas" in unknown[1]
