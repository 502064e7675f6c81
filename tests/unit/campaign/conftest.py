"""Fixtures: hand-made trace summaries, the real H200 summary, a full `campaign` dict (helpers in
campaign_helpers.py)."""

import copy

import pytest

from campaign_helpers import CPU_TRACE, H200, make_summary, rank_entry


@pytest.fixture
def two_ranks() -> dict:
    """Rank 0: 12 ms CUDA (all-reduce 4); rank 1: 30 ms (all-reduce 20). Means 12 of 21 ms."""
    return make_summary([rank_entry(0, {"allreduce": 4.0, "gemm": 6.0, "norm": 2.0}),
                         rank_entry(1, {"allreduce": 20.0, "gemm": 8.0, "memset": 2.0})], skew=3.5)


@pytest.fixture(scope="session")
def h200_summary() -> dict:
    from vllm_ops.traces import SummaryOptions, summarize

    return summarize([str(H200)], SummaryOptions(decode_pattern="^decode_step$", jobs=1))


@pytest.fixture(scope="session")
def cpu_summary() -> dict:
    """The summary of a real vLLM CPU-backend trace: 15 decode steps, no GPU kernel."""
    from vllm_ops.traces import SummaryOptions, summarize

    return summarize([str(CPU_TRACE)], SummaryOptions(jobs=1))


@pytest.fixture
def campaign(two_ranks) -> dict:
    return {
        "id": "c20250131T120000", "host": "vllm-sandbox",
        "started_at": "2025-01-31T12:00:00Z", "finished_at": "2025-01-31T12:14:07Z",
        "model": "Qwen/Qwen3-8B", "vllm_version": "0.11.0", "tensor_parallel_size": 2,
        "environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "8", "HF_TOKEN": "s3cr3t"},
        "settings": {"max_model_len": 4096},
        "profiler_config": {"profiler": "torch", "torch_profiler_dir": "/var/tmp/vllm-traces"},
        "load": {"requests": 8, "concurrency": 1, "batch_size": 1, "prompt_tokens": 512, "output_tokens": 128,
                 "warmup_requests": 2},
        "latency": {"ttft_ms": {"count": 8, "mean": 41.25, "p50": 40.5, "p90": 45.0, "p99": 47.9, "min": 38.0,
                                "max": 48.0},
                    "tpot_ms": {"count": 8, "mean": 16.5, "p50": 16.4, "p90": 17.0, "p99": 17.3, "min": 16.1,
                                "max": 17.4}},
        "traces": [{"rank": 1, "file": "/var/tmp/vllm-traces/c1_rank1.pt.trace.json.gz", "bytes": 801498,
                    "sha256": "ab" * 32},
                   {"rank": 0, "file": "/var/tmp/vllm-traces/c1_rank0.pt.trace.json.gz", "bytes": 768367,
                    "sha256": "cd" * 32}],
        "summary": copy.deepcopy(two_ranks), "summary_json": "summary.json", "chart_png": "decode.png",
        "report": "artifacts/vllm-sandbox/c20250131T120000/report.md",
    }
