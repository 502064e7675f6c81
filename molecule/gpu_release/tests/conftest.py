"""Fixtures for the gpu_release suite (helpers: molecule/resources/testlib.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import UNIT, holders, run_playbook, wait_for


@pytest.fixture
def play():
    return run_playbook


@pytest.fixture
def leftover(host):
    """Start a vLLM server by hand, outside systemd, as someone debugging would."""
    started = []

    def start():
        host.run(f"systemctl stop {UNIT}")
        host.check_output(
            "setsid -f env VLLM_STANDIN_LOAD_S=1 /opt/vllm-standin/bin/vllm serve /srv/models/kimi-k25-int4 "
            "--tensor-parallel-size 2 --port 8100 >/tmp/leftover.log 2>&1"
        )
        wait_for(lambda: holders(host, "/dev/nvidia0") and holders(host, "/dev/nvidia1"),
                 "the workers to hold the GPUs")
        pids = holders(host, "/dev/nvidia0") + holders(host, "/dev/nvidia1")
        started.extend(pids)
        return pids

    yield start
    host.run("rm -f /run/vllm-standin/*")
    for pid in started:
        host.run(f"kill -9 {pid} 2>/dev/null")
    host.run("pkill -9 -f 'vllm serve /srv/models/kimi-k25-int4 --tensor-parallel-size 2 --port 8100'")
