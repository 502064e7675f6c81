"""Helpers for the campaign tests: hand-made trace summaries, paths, the ansible environment."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
H200 = (REPO / ".." / "shared" / "traces" / "h200_tp2_decode").resolve()
CATEGORIES = ("allreduce", "collective", "moe_gemm", "attention", "gemm", "norm", "quantize", "elementwise",
              "memcpy", "memset", "other")


def rank_entry(rank: int, cats: dict | None, steps: int = 10) -> dict:
    """A summary rank entry as the summarizer writes it; ``cats`` None means no GPU data."""
    if cats is None:
        return {"rank": rank, "file": f"/t/rank{rank}.json.gz", "device": None, "decode_steps": steps,
                "cuda_ms_per_step": None, "step_wall_ms_per_step": None, "categories": {}, "top_kernels": [],
                "allreduce_ms_per_step": None, "allreduce_share": None}
    cuda = sum(cats.values())
    return {
        "rank": rank, "file": f"/t/rank{rank}.json.gz", "device": "Test GPU", "decode_steps": steps,
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
    return {
        "decode_pattern": "^decode_step$", "prefill_pattern": "^prefill$", "world_size": len(ranks),
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
