"""Helpers for the gpu_release tests: real processes holding regular files as "devices".

The lib is the collection's plugins/module_utils/gpu_release_lib.py (it runs on managed hosts), imported
by the name Ansible gives it there.
"""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "gpu_release"

# A vLLM-like worker: title VLLM::Worker_TP0 by argv[0], holds the files it is given open,
# says "ready" once they are open, optionally ignores SIGTERM.
HOLDER_CODE = textwrap.dedent(
    """
    import signal, sys, time
    if sys.argv[1] == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    handles = [open(path, "rb") for path in sys.argv[2:]]
    print("ready", flush=True)
    while True:
        time.sleep(60)
    """
)

SETUP_TIMEOUT_S = 30


def wait_until(predicate, what):
    """Poll a setup condition; a bound only so a broken setup fails instead of hanging."""
    deadline = time.monotonic() + SETUP_TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("setup: timed out waiting for %s" % what)
        time.sleep(0.05)


def alive(proc):
    """True while the child runs (a zombie, i.e. exited but not reaped, is not alive)."""
    try:
        with open("/proc/%d/stat" % proc.pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def holds(pid, path):
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == str(path):
                return True
        except OSError:
            continue
    return False


class Holders:
    """Starts holder processes and kills whatever is left of them afterwards."""

    def __init__(self):
        self.procs = []

    def owned(self, *paths, ignore_term=False, title="VLLM::Worker_TP0"):
        proc = subprocess.Popen(
            [title, "-c", HOLDER_CODE, "ignore-term" if ignore_term else "plain"]
            + [str(p) for p in paths],
            executable=sys.executable, stdout=subprocess.PIPE, universal_newlines=True,
        )
        self.procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc

    def foreign(self, path):
        """``sleep`` holding the file through a shell redirect, as an unrelated job would."""
        proc = subprocess.Popen(["sh", "-c", 'exec sleep 600 < "$0"', str(path)])
        self.procs.append(proc)
        wait_until(lambda: _comm(proc.pid) == "sleep" and holds(proc.pid, path),
                   "sleep to hold %s" % path)
        return proc

    def cleanup(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout:
                proc.stdout.close()


def _comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as handle:
            return handle.read().strip()
    except OSError:
        return None


FAKE_NVIDIA_SMI = """#!{python}
# Test stand-in for nvidia-smi: memory.used per GPU from a JSON state file. A GPU reports
# busy_mib while the process busy_while_pid lives (a zombie counts as gone), else idle_mib.
# minor_number is answered only for GPUs that give "minor" (else empty, as unknown).
import json, sys
state = json.load(open({state!r}))
if state.get("fail"):
    sys.stderr.write("NVIDIA-SMI has failed because it couldn't communicate with the driver\\n")
    sys.exit(9)
def busy(gpu):
    pid = gpu.get("busy_while_pid")
    if not pid:
        return False
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
args = " ".join(sys.argv[1:])
for gpu in state["gpus"]:
    if "--query-gpu=index,memory.used" in args:
        print("%d, %d" % (gpu["index"], gpu["busy_mib"] if busy(gpu) else gpu["idle_mib"]))
    elif "--query-gpu=index,minor_number" in args and "minor" in gpu:
        print("%d, %d" % (gpu["index"], gpu["minor"]))
    elif "--query-compute-apps=pid,process_name,used_memory" in args and busy(gpu):
        print("%d, VLLM::Worker_TP0, %d" % (gpu["busy_while_pid"], gpu["busy_mib"]))
"""
