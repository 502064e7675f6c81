"""Helpers for the campaign tests: hand-made trace summaries, paths, the ansible environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
H200 = REPO / "tests" / "data" / "traces" / "h200_tp2_decode"
# A real vLLM 0.32 CPU-backend trace: TP 1, a tiny Llama, 15 decode steps, no GPU kernel at all.
CPU_TRACE = REPO / "tests" / "unit" / "traces" / "data" / "rank0.1796013877177788456.pt.trace.json.gz"
CATEGORIES = ("allreduce", "collective", "moe_gemm", "attention", "gemm", "norm", "quantize", "elementwise",
              "memcpy", "memset", "other")


def rank_entry(rank: int, cats: dict | None, steps: int = 10, gpu_kernels: int | None = None) -> dict:
    """A summary rank entry as the summarizer writes it; ``cats`` None means no GPU figures, by
    default because the trace has no GPU kernels (pass ``gpu_kernels`` > 0 for a GPU trace whose
    figures are null for another reason, such as no decode steps)."""
    if gpu_kernels is None:
        gpu_kernels = 0 if cats is None else 500
    if cats is None:
        return {"rank": rank, "file": f"/t/rank{rank}.json.gz", "device": None, "gpu_kernels": gpu_kernels,
                "gpu_time_measured": gpu_kernels > 0, "decode_steps": steps,
                "steps_from": ("gpu_user_annotation" if gpu_kernels else "user_annotation") if steps else None,
                "cuda_ms_per_step": None, "step_wall_ms_per_step": None, "categories": {}, "top_kernels": [],
                "allreduce_ms_per_step": None, "allreduce_share": None}
    cuda = sum(cats.values())
    return {
        "rank": rank, "file": f"/t/rank{rank}.json.gz", "device": "Test GPU", "gpu_kernels": gpu_kernels,
        "gpu_time_measured": True, "decode_steps": steps, "steps_from": "gpu_user_annotation",
        "cuda_ms_per_step": cuda, "step_wall_ms_per_step": cuda + 1.0,
        "categories": {c: {"ms_per_step": cats.get(c, 0.0), "share": cats.get(c, 0.0) / cuda if cuda else None}
                       for c in CATEGORIES},
        "top_kernels": [{"name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "category": "allreduce",
                         "ms_per_step": cats.get("allreduce", 0.0), "calls_per_step": 61.0}],
        "allreduce_ms_per_step": cats.get("allreduce", 0.0),
        "allreduce_share": cats.get("allreduce", 0.0) / cuda if cuda else None,
    }


def make_summary(ranks: list[dict], skew: float | None = None, warnings: list[str] | None = None) -> dict:
    live = [r for r in ranks if r["cuda_ms_per_step"] is not None]
    unmeasured = [r["rank"] for r in ranks if not r["gpu_time_measured"]]
    return {
        "decode_pattern": "^decode_step$", "prefill_pattern": "^prefill$", "world_size": len(ranks),
        "gpu_time_measured": len(unmeasured) < len(ranks), "ranks_without_gpu_kernels": unmeasured,
        "ranks": ranks,
        "allreduce": {
            "share_mean": sum(r["allreduce_share"] or 0.0 for r in live) / len(live) if live else None,
            "ms_per_step_mean": sum(r["allreduce_ms_per_step"] for r in live) / len(live) if live else None,
            "ms_per_step_skew_corrected": skew, "wait_ms_per_step_by_rank": {}, "calls_matched": 0,
        },
        "prefill": [], "warnings": list(warnings or []),
    }


def write_json(path: Path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def ansible_env() -> dict:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    return env


def ansible_tool(name: str) -> Path:
    tool = BIN / name
    if not tool.exists():
        pytest.skip(f"{tool} not installed")
    return tool
