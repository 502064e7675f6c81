"""Helpers that run the sandbox stand-ins (molecule/resources/standin) locally.

Every server listens on 127.0.0.1 on a free port; device files, claims,
fault switches and traces live under the test's tmp_path. Each server runs in
its own session, so teardown can kill exactly the processes it started (the
API server, its EngineCore and workers) by process-group id.
"""

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
STANDIN_DIR = ROOT / "molecule" / "resources" / "standin"
VLLM = STANDIN_DIR / "bin" / "vllm"  # the launcher, run as on the sandbox; the package is in lib/
STANDIN_LIB = STANDIN_DIR / "lib"
NVIDIA_SMI = STANDIN_DIR / "nvidia_smi.py"
TEMPLATES = ROOT / "tests" / "data" / "traces" / "h200_tp2_decode"
H200_MIB = 143771
WAIT_S = 60  # generous bound for any wait; tests never assert on durations
NOT_ANSWERED = "accepted but not answered"  # what Server.health says of a timeout
# vLLM 0.32's saved result (CPU build, --percentile-metrics ttft,tpot,itl,e2el
# --metric-percentiles 50,90,99, not speculating), in its order
BENCH_RESULT_KEYS = [
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "latencies", "queue_times",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "itl", "e2el")
      for stat in ("mean", "median", "std", "p50", "p90", "p99")),
]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout=WAIT_S, interval=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def children(pid):
    """Direct children of ``pid`` (from /proc/*/stat)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return sorted(found)


def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()


def comm(pid):
    return Path(f"/proc/{pid}/comm").read_text().strip()


def fd_targets(pid):
    targets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            targets.add(os.readlink(fd))
    return targets


class Sandbox:
    """Directories and environment knobs shared by both stand-ins."""

    def __init__(self, root, gpus=8):
        self.root = root
        self.dev = root / "dev"
        self.claims = root / "claims"
        self.faults = root / "faults"
        self.traces = root / "traces" / "nested"  # created by the stand-in
        self.model = root / "models" / "kimi"
        for path in (self.dev, self.claims, self.faults, self.model):
            path.mkdir(parents=True)
        for index in range(gpus):
            (self.dev / f"nvidia{index}").touch()
        (self.dev / "nvidiactl").touch()  # not a GPU: must be ignored
        (self.model / "config.json").write_text('{"max_position_embeddings": 4096}')
        self.env = {
            **os.environ,
            "VLLM_STANDIN_LOAD_S": "1",
            "VLLM_STANDIN_FLUSH_S": "0.1",
            "VLLM_STANDIN_WORKER_STOP_S": "1",
            "VLLM_STANDIN_DEVICE_PATTERN": str(self.dev / "nvidia{rank}"),
            "VLLM_STANDIN_FAULT_DIR": str(self.faults),
            "VLLM_STANDIN_TRACE_TEMPLATES": str(root / "no-templates"),
            "VLLM_STANDIN_CONFIG": str(root / "standin.env"),
            "VLLM_CACHE_ROOT": str(root / "vllm-cache"),  # the compile cache, out of the runner's home
            "GPU_SIM_CLAIM_DIR": str(self.claims),
            "GPU_SIM_DEVICE_GLOB": str(self.dev / "nvidia[0-9]*"),
        }
        self.env.pop("VLLM_API_KEY", None)
        self.env.pop("CUDA_VISIBLE_DEVICES", None)

    def set_fault(self, name, content=""):
        (self.faults / name).write_text(content)

    def smi(self, *args):
        return subprocess.run([sys.executable, str(NVIDIA_SMI), *args], env=self.env,
                              capture_output=True, text=True, timeout=WAIT_S)


class Server:
    """One vLLM stand-in (API server and its process tree)."""

    def __init__(self, sandbox, log_path):
        self.sandbox = sandbox
        self.log_path = log_path
        self.port = free_port()
        self.proc = None

    def start(self, *extra, tp=1, env=None, model=None, command=None):
        """``command`` (default: this Python running the launcher) ``serve MODEL ...``."""
        argv = [*(command or [sys.executable, str(VLLM)]), "serve", str(model or self.sandbox.model),
                "--host", "127.0.0.1", "--port", str(self.port),
                "--tensor-parallel-size", str(tp), "--gpu-memory-utilization", "0.95",
                "--max-model-len", "4096", *extra]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         env={**self.sandbox.env, **(env or {})},
                                         start_new_session=True)
        return self

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path, **kw):
        return requests.get(self.url(path), timeout=kw.pop("timeout", 10), **kw)

    def post(self, path, **kw):
        return requests.post(self.url(path), timeout=kw.pop("timeout", 30), **kw)

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait_log(self, pattern, timeout=WAIT_S):
        return wait_for(lambda: re.search(pattern, self.log()), timeout,
                        what=f"log line {pattern!r}")

    def health(self, timeout=5):
        """/health status; None for a refused connection, NOT_ANSWERED for a timeout."""
        try:
            return self.get("/health", timeout=timeout).status_code
        except requests.ConnectionError:
            return None
        except requests.Timeout:
            return NOT_ANSWERED

    def wait_ready(self):
        """Poll /health as the role does: refused while loading, then 200.
        Returns every status seen before ready (None = connection refused)."""
        seen = []

        def probe():
            assert self.proc.poll() is None, f"server exited early:\n{self.log()}"
            status = self.health()
            if status != 200:
                seen.append(status)
            return status == 200

        wait_for(probe, what="/health 200")
        self.tree()
        return seen

    def tree(self):
        """(engine pid, [worker pids by rank]) as running now."""
        engines = children(self.proc.pid)
        assert len(engines) == 1, engines
        workers = sorted(children(engines[0]), key=cmdline)
        return engines[0], workers

    def wait_exit(self, timeout=WAIT_S):
        return self.proc.wait(timeout=timeout)

    def kill_all(self):
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # our own session only
        self.proc.wait(timeout=WAIT_S)


# The project's loopback fence (roles/vllm/files), for servers started with --middleware.
FENCE_DIR = Path(__file__).resolve().parents[2] / "roles" / "vllm" / "files"


def own_address() -> str:
    """This machine's address on its default route (no packet is sent): a non-loopback client."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
    assert not address.startswith("127."), address
    return address


def request_from(address, port, method, path, body=None, headers=None):
    """(status, body) of a request whose client address is ``address``."""
    conn = http.client.HTTPConnection(address, port, timeout=10, source_address=(address, 0))
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers={"content-type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()
