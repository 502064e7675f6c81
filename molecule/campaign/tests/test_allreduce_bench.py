"""playbooks/allreduce_bench.yml on the sandbox with the stand-in: what it refuses, and that it
refuses before touching the service. (The measurement itself needs PyTorch: Molecule vllm_cpu.)"""

from __future__ import annotations

import json
import shlex

from conftest import LOCK
from testlib import UNIT, run_playbook

PLAYBOOK = "playbooks/allreduce_bench.yml"


def main_pid(host) -> int:
    return int(host.check_output(f"systemctl show -p MainPID --value {UNIT}"))


def refused(host, tmp_path, extra: dict) -> str:
    """Run the benchmark, which must fail in its preflight; return the message, having checked that
    the service kept running (same main PID), no lock is left and nothing was written."""
    before = main_pid(host)
    artifacts = tmp_path / "artifacts"
    play = run_playbook(PLAYBOOK, "-e", json.dumps({"allreduce_bench_artifacts_dir": str(artifacts), **extra}))
    assert play.rc != 0, play.output[-3000:]
    assert main_pid(host) == before
    assert not host.file(LOCK).exists
    assert not artifacts.exists()
    failed = [t for p in play.data["plays"] for t in p["tasks"] for h in t["hosts"].values() if h.get("failed")]
    return failed[0]["hosts"][next(iter(failed[0]["hosts"]))]["msg"]


def test_a_python_without_torch_is_refused(host, tmp_path):
    # The stand-in host has no PyTorch at all: its system Python stands for a venv without torch.
    msg = refused(host, tmp_path, {"allreduce_bench_python": "/usr/bin/python3"})
    assert msg.startswith("allreduce_bench_python (/usr/bin/python3) on vllm-mol-campaign cannot import torch "
                          "(ModuleNotFoundError: No module named 'torch'): point it at the Python of the vLLM venv")


def test_a_world_size_above_the_gpus_is_refused(host, tmp_path):
    msg = refused(host, tmp_path, {"allreduce_bench_backend": "nccl", "allreduce_bench_world_size": 3})
    assert msg.startswith("allreduce_bench_world_size is 3 but vllm-mol-campaign has 2 GPU device node(s)")


def test_a_gpu_held_by_another_process_is_refused_before_the_stop(host, tmp_path):
    host.check_output("setsid -f bash -c 'exec 3</dev/nvidia1; exec sleep 300' >/dev/null 2>&1")
    try:
        (pid,) = [p for p in host.check_output("pgrep -x -f 'sleep 300'").split()]
        msg = refused(host, tmp_path, {})
        assert "not owned by the service left alive" in msg and f"PID {pid} (command 'sleep 300', user root)" in msg
    finally:
        host.run("pkill -x -f 'sleep 300'")


def test_bad_variants_are_refused(host, tmp_path):
    msg = refused(host, tmp_path, {"allreduce_bench_variants": [{"name": "LL", "environment": {"NCCL_PROTO": "LLX"}}]})
    assert msg.startswith("allreduce_bench_variants[LL].environment.NCCL_PROTO is 'LLX'")


FAKE_PYTHON = """#!/bin/sh
# Test double of a venv's Python: imports torch (the preflight's question), then fails the
# measurement as allreduce_bench.py does when NCCL fails: its one line on stderr, exit status 3.
[ "$1" = -c ] && { echo 2.13.0; exit 0; }
echo "allreduce_bench: measurement failed: rank 1 died (exit code 1)" >&2
exit 3
"""


def test_a_failed_measurement_says_why_and_restores_the_service(host, tmp_path):
    host.check_output(f"printf '%s' {shlex.quote(FAKE_PYTHON)} > /tmp/fake-python && chmod 0755 /tmp/fake-python")
    before = main_pid(host)
    artifacts = tmp_path / "artifacts"
    play = run_playbook(PLAYBOOK, "-e", json.dumps({"allreduce_bench_artifacts_dir": str(artifacts),
                                                    "allreduce_bench_python": "/tmp/fake-python"}))
    assert play.rc != 0
    msg = play.result("Fail with the benchmark's original error, now that the host is restored")["msg"]
    assert "(the normal service is back and healthy)" in msg
    assert "allreduce_bench.py exited 3 on vllm-mol-campaign: allreduce_bench: measurement failed: rank 1 died" in msg
    assert "journalctl -u vllm-ops-allreduce-" in msg
    # The service was stopped for the measurement and started again; the lock is gone.
    assert main_pid(host) != before
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert not host.file(LOCK).exists
    host.run("rm -f /tmp/fake-python")
