"""vllm_profile_run reads the PCIe links while the profiled requests run, against both stand-ins.

The module (plugins/modules/vllm_profile_run.py) runs as on the host: the vLLM stand-in serves two ranks on
simulated GPUs, the nvidia-smi stand-in reports their links, and its fault switch trains GPU 1's
link at x4. What the module records is then judged by vllm_ops.fabric, as the report will.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from ansible_collections.vllm_ops.serving.plugins.modules import vllm_profile_run as MODULE

from vllm_ops import fabric

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "standin"))

from standin_support import NVIDIA_SMI, Sandbox, Server  # noqa: E402


@pytest.fixture
def served(tmp_path, monkeypatch):
    sandbox = Sandbox(tmp_path)
    for key in ("GPU_SIM_DEVICE_GLOB", "GPU_SIM_CLAIM_DIR", "VLLM_STANDIN_FAULT_DIR"):
        monkeypatch.setenv(key, sandbox.env[key])  # what the module's nvidia-smi runs see
    server = Server(sandbox, tmp_path / "vllm.log")
    profiler = json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path / "traces")})
    server.start("--profiler-config", profiler, tp=2)
    server.wait_ready()
    yield sandbox, server
    server.kill_all()


def params(server, nvidia_smi):
    return {"base_url": server.url(""), "model": str(server.sandbox.model), "api_key": "", "prompt": "a b c",
            "output_tokens": 8, "requests": 2, "concurrency": 1, "warmup_requests": 1, "profile_prefix": "t",
            "max_iterations": 0, "request_timeout_s": 60, "stop_timeout_s": 60,
            "fabric_nvidia_smi": nvidia_smi, "fabric_interval_s": 0.2}


def test_the_degraded_link_read_during_the_requests_is_named_with_its_rank(served):
    sandbox, server = served
    sandbox.set_fault("pcie-link-degraded", "1")
    result = MODULE.run(params(server, str(NVIDIA_SMI)))
    record = result["fabric"]
    assert record["read"] and record["samples"] >= 1 and record["during"] == "during the profiled requests"
    by_gpu = {g["index"]: g for g in record["gpus"]}
    assert (by_gpu[0]["width_current"], by_gpu[1]["width_current"]) == (16, 4)
    assert by_gpu[0]["gen_current"] == 5 and by_gpu[0]["utilization_pct"] == 45  # read under load
    workers = sorted(a["process_name"] for a in record["compute_apps"])
    assert workers == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]
    assert "GPU0\tX\tOK" in record["p2p_read"]

    capture = {"tensor_parallel_size": 2, "environment": {}, "fabric": record}
    assessment = fabric.assess(capture)
    assert assessment["rank_basis"].startswith("observed")
    assert fabric.warnings(capture) == ["PCIe link of GPU 1 (00000000:2A:00.0, rank 1) at x4 of x16, Gen5 of Gen5 "
                                        "(25% of its bandwidth), read during the profiled requests"]


def test_without_nvidia_smi_the_capture_goes_on_and_says_so(served):
    _, server = served
    result = MODULE.run(params(server, "/no/such/nvidia-smi"))
    assert len(result["ttft_ms"]) == 2
    assert result["fabric"]["read"] is False
    assert result["fabric"]["reason"] == "/no/such/nvidia-smi not found on the host"
    off = MODULE.run(params(server, ""))["fabric"]
    assert off["read"] is False and off["reason"].startswith("not asked")
