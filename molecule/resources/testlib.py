"""Helpers shared by the Molecule scenarios' testinfra suites.

Each suite runs the real playbooks against its Molecule instance (the
inventory Molecule wrote, MOLECULE_INVENTORY_FILE) and reads their results
through Ansible's JSON callback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
UNIT = "vllm-kimi-k25-int4"
FAULT_DIR = "/run/vllm-standin"  # the stand-in's fault files (molecule/resources/standin/README.md)
LOCK = "/run/vllm-ops/job.lock"
# The lock of releases before the job lock, honoured until stale.
OLD_LOCK = "/run/vllm-ops/campaign.lock"
INCIDENTS = "/var/lib/vllm-ops/incidents"  # the watch's (docs/watch.md), one directory per incident
TRAFFIC = "/run/vllm-ops-test-traffic"  # while it exists, start_traffic's senders send
MODEL = "/srv/models/kimi-k25-int4"  # the sandbox's checkpoint (64 sparse shards)
SHARDS_SHARE = 0.85  # the stand-in's share of a load spent in the shards (standin/lib/vllm_standin/worker.py)


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

    @property
    def changed_tasks(self) -> list[str]:
        """Names of the tasks that reported a change on some host (for assertion messages)."""
        return [task["task"]["name"] for play in self.data.get("plays", []) for task in play["tasks"]
                if any(result.get("changed") for result in task["hosts"].values())]


def run_playbook(playbook: str, *args: str, env: dict | None = None) -> Play:
    """ansible-playbook against the Molecule instance, with the JSON callback."""
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
                    ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", **(env or {}))
    cmd = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", os.environ["MOLECULE_INVENTORY_FILE"],
           str(ROOT / playbook), *args]
    return Play(subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True))


class Background:
    """ansible-playbook against the Molecule instance in the background, in its own session (killed
    as a group), its output in a file: a pipe that nobody reads while it runs blocks the playbook
    once full."""

    def __init__(self, playbook: str, *args: str, log: Path):
        self.log = log
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [str(ROOT / ".venv/bin/ansible-playbook"), "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                 str(ROOT / playbook), *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL, the playbook and every process it started, as a controller dies. Ansible runs each
        task's worker in a session of its own (WorkerProcess._detach), out of the playbook's process
        group: those are found by parentage first, or they outlive the test, blocked."""
        if self.running:
            for pid in descendants(self.proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` on this machine, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def start_playbook(playbook: str, *args: str, log: Path) -> Background:
    """ansible-playbook in the background (:class:`Background`), its output in ``log``."""
    return Background(playbook, *args, log=log)


def wait_for(predicate, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def assert_normal_service(host) -> None:
    """The normal service is active and healthy, without the profiling drop-in."""
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0
    assert not host.file(f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf").exists


def leave_normal(host) -> None:
    """After a test: clear the faults and locks it planted, then the normal service must be active and
    healthy (each job suite's autouse fixture)."""
    host.run(f"rm -f {FAULT_DIR}/* {LOCK} {OLD_LOCK}")
    assert_normal_service(host)


@pytest.fixture(autouse=True)
def healthy_after(host):
    """Every test must leave the normal service active and healthy, with no fault left (a job suite's
    conftest imports it, so that it runs after each of the suite's tests)."""
    yield
    leave_normal(host)


def standin_load_s(tests_dir: Path) -> float:
    """The scenario's load time of the stand-in (its one host's ``sandbox_standin_load_s``, host_vars),
    for the lower bounds the loads' tests assert."""
    (path,) = (Path(tests_dir).parent / "host_vars").glob("*.yml")
    return float(yaml.safe_load(path.read_text())["sandbox_standin_load_s"])


def checkpoint_bytes(host) -> int:
    """The sandbox checkpoint's size as stat reads it on the host."""
    sizes = host.check_output(f"stat -c %s {MODEL}/*.safetensors").split()
    return sum(int(s) for s in sizes)


def holders(host, device: str) -> list[int]:
    return [int(p) for p in host.run(f"fuser {device} 2>/dev/null").stdout.split()]


def start_traffic(host, model: str, senders: int = 2, tokens: int = 200) -> None:
    """Users on the host: each sender sends its next completion (``tokens`` long) as soon as one
    returns, until :func:`stop_traffic`, so that the server has requests in flight at any moment."""
    body = json.dumps({"model": model, "prompt": "hello", "max_tokens": tokens, "ignore_eos": True})
    script = (f"while [ -e {TRAFFIC} ]; do curl -s -o /dev/null -m 600 -H 'Content-Type: application/json' "
              f"-d {shlex.quote(body)} http://127.0.0.1:8000/v1/completions; done")
    host.check_output(f"touch {TRAFFIC}")
    for _ in range(senders):
        host.run(f"nohup sh -c {shlex.quote(script)} >/dev/null 2>&1 &")


def in_flight(host) -> float:
    """The server's requests running and waiting, from its /metrics."""
    text = host.check_output("curl -s http://127.0.0.1:8000/metrics")
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{")))


def stop_traffic(host) -> None:
    """The senders send no more (each finishes the request it is in)."""
    host.run(f"rm -f {TRAFFIC}")


def incident_names(host) -> set[str]:
    """The watch's incidents on the host, by name (their UTC time): those with their incident.json, which
    the watch writes after the evidence (its directory exists from the first file on)."""
    listed = host.check_output(f"ls -1 {INCIDENTS}/*/incident.json 2>/dev/null || true").split()
    return {name for name in (Path(path).parent.name for path in listed) if re.fullmatch(r"\d{8}T\d{6}Z", name)}


def read_incident(host, name: str) -> dict:
    return json.loads(host.file(f"{INCIDENTS}/{name}/incident.json").content_string)
