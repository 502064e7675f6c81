"""Fixtures: run playbooks against the Molecule instance, read their results."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNIT = "vllm-kimi-k25-int4"


class Play:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.rc = proc.returncode
        self.output = proc.stdout + proc.stderr
        # The json callback prints one document; other callbacks may print around it.
        start = proc.stdout.find("\n{\n") + 1 if not proc.stdout.startswith("{") else 0
        self.data = json.JSONDecoder().raw_decode(proc.stdout[start:])[0] if "{" in proc.stdout else {}

    def result(self, task_name: str) -> dict:
        """The first host's result of the named task."""
        for play in self.data.get("plays", []):
            for task in play["tasks"]:
                if task["task"]["name"].split(" : ", 1)[-1] == task_name:
                    return next(iter(task["hosts"].values()))
        raise AssertionError(f"task {task_name!r} did not run:\n{self.output[-3000:]}")

    @property
    def changed(self) -> int:
        return sum(s["changed"] for s in self.data["stats"].values())


@pytest.fixture
def play():
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]

    def run(playbook: str, *args: str) -> Play:
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                   ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
        cmd = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", inventory, str(ROOT / playbook), *args]
        return Play(subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True))

    return run


def wait_for(predicate, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def holders(host, device: str) -> list[int]:
    return [int(p) for p in host.run(f"fuser {device} 2>/dev/null").stdout.split()]


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
        wait_for(lambda: holders(host, "/dev/nvidia0") and holders(host, "/dev/nvidia1"), "the workers to hold the GPUs")
        pids = holders(host, "/dev/nvidia0") + holders(host, "/dev/nvidia1")
        started.extend(pids)
        return pids

    yield start
    host.run("rm -f /run/vllm-standin/*")
    for pid in started:
        host.run(f"kill -9 {pid} 2>/dev/null")
    host.run("pkill -9 -f 'vllm serve /srv/models/kimi-k25-int4 --tensor-parallel-size 2 --port 8100'")
