"""playbooks/allreduce_bench.yml on the sandbox with the stand-in: what it refuses, and that it
refuses before touching the service. (The measurement itself needs PyTorch: Molecule vllm_cpu.)"""

from __future__ import annotations

import json
import re
import shlex

from testlib import LOCK, ROOT, UNIT, run_playbook

PLAYBOOK = "playbooks/allreduce_bench.yml"


def main_pid(host) -> int:
    return int(host.check_output(f"systemctl show -p MainPID --value {UNIT}"))


def refused(host, tmp_path, extra: dict) -> str:
    """Run the benchmark, which must fail in its preflight; return the message, having checked that
    the service kept running (same main PID), no lock is left and nothing was written."""
    before = main_pid(host)
    artifacts = tmp_path / "artifacts"
    play = run_playbook(PLAYBOOK, "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts), **extra}))
    assert play.rc != 0, play.output[-3000:]
    assert main_pid(host) == before
    assert not host.file(LOCK).exists
    assert not artifacts.exists()
    failed = [t for p in play.data["plays"] for t in p["tasks"] for h in t["hosts"].values() if h.get("failed")]
    return failed[0]["hosts"][next(iter(failed[0]["hosts"]))]["msg"]


def test_a_python_without_torch_is_refused(host, tmp_path):
    # The stand-in host has no PyTorch at all: its system Python stands for a venv without torch.
    msg = refused(host, tmp_path, {"allreduce_bench_python": "/usr/bin/python3"})
    assert msg.startswith("allreduce_bench_python (/usr/bin/python3) on vllm-mol-allreduce cannot import torch "
                          "(ModuleNotFoundError: No module named 'torch'): point it at the Python of the vLLM venv")


def test_a_world_size_above_the_gpus_is_refused(host, tmp_path):
    msg = refused(host, tmp_path, {"allreduce_bench_backend": "nccl", "allreduce_bench_world_size": 3})
    assert msg.startswith("allreduce_bench_world_size is 3 but vllm-mol-allreduce has 2 GPU device node(s)")


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
    play = run_playbook(PLAYBOOK, "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts),
                                                    "allreduce_bench_python": "/tmp/fake-python"}))
    assert play.rc != 0
    msg = play.result("Fail with the job's original error, now that the host is restored")["msg"]
    # The measurement stopped the service: the skeleton's downtime record says what that cost.
    back = r"\(the normal service is back and healthy; downtime [\d.]+ s in \d+ gaps?( \(longest [\d.]+ s\))?\)"
    assert re.search(back, msg), msg
    assert "allreduce_bench.py exited 3 on vllm-mol-allreduce: allreduce_bench: measurement failed: rank 1 died" in msg
    assert "journalctl -u vllm-ops-allreduce-" in msg
    # The service was stopped for the measurement and started again; the lock is gone.
    assert main_pid(host) != before
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert not host.file(LOCK).exists
    host.run("rm -f /tmp/fake-python")


# Test double of a venv's Python that runs allreduce_bench.py: imports torch (the preflight's
# question), then writes the measurement as the real script does, a recorded H200 result, to the
# path given after --out.
DOUBLE_PYTHON = """#!/bin/sh
[ "$1" = -c ] && { echo 2.13.0; exit 0; }
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
cp /usr/local/lib/vllm-ops-test/floor.json "$out"
"""
RECORDED = ROOT / "tests/gpu/results/allreduce_h200_ws1_default.json"


def test_a_measurement_records_the_downtime_it_cost(host, tmp_path):
    host.check_output("mkdir -p /usr/local/lib/vllm-ops-test")
    host.check_output(f"printf '%s' {shlex.quote(RECORDED.read_text())} > /usr/local/lib/vllm-ops-test/floor.json")
    host.check_output(f"printf '%s' {shlex.quote(DOUBLE_PYTHON)} > /usr/local/lib/vllm-ops-test/python"
                      " && chmod 0755 /usr/local/lib/vllm-ops-test/python")
    before = main_pid(host)
    artifacts = tmp_path / "artifacts"
    try:
        extra = {"vllm_job_artifacts_dir": str(artifacts),
                 "allreduce_bench_python": "/usr/local/lib/vllm-ops-test/python"}
        play = run_playbook(PLAYBOOK, "-e", json.dumps(extra))
    finally:
        host.run("rm -rf /usr/local/lib/vllm-ops-test")
    assert play.rc == 0, play.output[-4000:]
    (job_dir,) = (artifacts / host.backend.hostname).iterdir()
    job = json.loads((job_dir / "job.json").read_text())
    assert (job["kind"], job["id"], job["host"], job["error"]) == ("all-reduce floor", job_dir.name,
                                                                   host.backend.hostname, None)
    # The stop and the load after it: /health failed at least one poll, in one gap that ended.
    down = job["downtime"]
    assert down["failed_polls"] > 0 and down["gaps"] >= 1 and down["seconds_not_ready"] > 0, down
    assert not any(gap["open"] for gap in down["gap_list"])
    words = f"downtime {down['seconds_not_ready']:.1f} s in {down['gaps']} gap"
    headline = play.result("Print the headline")["msg"]
    assert headline.startswith(f"{host.backend.hostname}: all-reduce on 1 rank"), headline
    assert f"; {words}" in headline and headline.endswith(f"-> {job_dir}/allreduce/allreduce.md")
    # The restore's load, phase by phase from the stand-in's lines: one load, the normal service's.
    (load,) = job["loads"]
    assert load["variant"] is None and load["ready"], load
    assert "; 1 load, ready in " in headline and "disk floor not measured" in headline, headline
    assert (job_dir / "loads.txt").read_text().startswith("load 1 (the normal service): ")
    assert json.loads((job_dir / "allreduce" / "allreduce-unit.json").read_text()) == json.loads(RECORDED.read_text())
    assert main_pid(host) != before
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert not host.file(LOCK).exists
