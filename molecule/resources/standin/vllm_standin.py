#!/usr/bin/python3
"""A stand-in for ``vllm serve`` (vLLM 0.32) on a host without GPUs.

Test double for the sandbox host: installed as /opt/vllm-standin/bin/vllm, it
takes the CLI the systemd unit passes and behaves as vLLM 0.32 does from the
outside: an API server process that starts a ``VLLM::EngineCore`` child, which
starts one ``VLLM::Worker_TP<r>`` per rank (``VLLM::Worker`` at TP 1); each
worker holds its GPU device file and claims memory for the nvidia-smi
stand-in; the port refuses
connections through the whole (simulated) load; then it serves /health,
/version, /v1/models, /v1/completions, /metrics and, with --profiler-config,
/start_profile and /stop_profile, writing one re-timed trace per rank;
--speculative-config and --max-num-seqs shape the decode timing and /metrics.
``vllm bench serve`` is a real client of vLLM 0.32's serving benchmark (random dataset,
streamed completions) that prints and saves vLLM's result.

Python 3.11 standard library only (the sandbox's python3 has no pip).
Knobs and fault switches: see README.md next to this file.
"""

import argparse
import asyncio
import contextlib
import ctypes
import gzip
import hmac
import importlib
import inspect
import json
import math
import os
import random
import re
import select
import signal
import socket
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.32.0"
FINGERPRINT = f"vllm-{VERSION}-5f0a1d2e"  # vLLM: version and a digest of its build
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
SCRIPT = os.path.abspath(__file__)
DECODE_ANNOTATION = "execute_context_0(0)_generation_1(1)"
# With detailed_trace_annotation (vLLM 0.26+): T scheduled tokens, then per group the sums of
# query and key lengths; one decode request whose context grows by a token a step.
DETAILED_DECODE = "execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk{k}sqsq1sqsk{k})"
DETAILED_CONTEXT = 128
PROTECTED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
PROFILER_BOOL_FIELDS = {
    "torch_profiler_with_stack": True,
    "torch_profiler_use_gzip": True,
    "torch_profiler_record_shapes": False,
    "torch_profiler_with_memory": False,
    "torch_profiler_with_flops": False,
    "torch_profiler_dump_cuda_time_total": True,
    "ignore_frontend": False,
    "capture_torch_profiler": False,
    "detailed_trace_annotation": False,
}
PROFILER_INT_FIELDS = {
    "delay_iterations": 0,
    "max_iterations": 0,
    "warmup_iterations": 0,
    "active_iterations": 5,
    "wait_iterations": 0,
}


# --------------------------------------------------------------------------
# Knobs (environment) and fault switches (files, read when the fault applies)
# --------------------------------------------------------------------------

def env_float(name, default):
    value = os.environ.get(name, "")
    try:
        return float(value) if value.strip() else default
    except ValueError:
        return default


def load_knob_file():
    """Defaults for the knobs from a KEY=VALUE file, so a sandbox can set them
    without touching the unit the role renders; the environment wins."""
    path = os.environ.get("VLLM_STANDIN_CONFIG", "/etc/vllm-standin.env")
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key.startswith(("VLLM_STANDIN_", "GPU_SIM_")):
            os.environ.setdefault(key, value.strip().strip('"'))


def fault_dir():
    return os.environ.get("VLLM_STANDIN_FAULT_DIR", "/run/vllm-standin")


def fault(name):
    """Content of fault switch ``name`` (stripped), or None when it is off."""
    try:
        with open(os.path.join(fault_dir(), name), encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def consume_if_once(name):
    """A switch whose content is ``once`` fires one time: remove it when it fires.

    Lets a test fail one start (the profiling variant's) and not the next
    (the restore's). The fault dir must be writable by the server's user.
    """
    if fault(name) == "once":
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(fault_dir(), name))


def fault_names_rank(name, rank):
    """A switch whose content lists ranks (empty: all) applies to ``rank``."""
    content = fault(name)
    if content is None:
        return False
    ranks = [tok for tok in re.split(r"[\s,]+", content) if tok]
    return not ranks or str(rank) in ranks


# --------------------------------------------------------------------------
# Logging as vLLM prints it: "(APIServer pid=N) INFO MM-DD HH:MM:SS [f.py:NN] m"
# --------------------------------------------------------------------------

_LABEL = "APIServer"
_OUT_LOCK = threading.Lock()


def _emit(stream, text, prefixed=True):
    """Write ``text`` line by line. vLLM's logger puts the process prefix on its
    records; what goes around it (tqdm, print(), uvicorn) has none."""
    prefix = f"({_LABEL} pid={os.getpid()}) " if prefixed else ""
    lines = "".join(prefix + line + "\n" for line in text.split("\n"))
    with _OUT_LOCK:
        stream.write(lines)
        stream.flush()


def log(level, where, msg):
    stamp = time.strftime("%m-%d %H:%M:%S")
    _emit(sys.stdout, f"{level} {stamp} [{where}] {msg}")


def uvicorn_log(msg, level="INFO"):
    _emit(sys.stdout, f"{level + ':':<9} {msg}", prefixed=False)


def fail_with_traceback(exc_type, message, where="api_server.py:1"):
    _emit(sys.stderr, "Traceback (most recent call last):\n"
          f'  File "{SCRIPT}", line 1, in <module>\n'
          f"    [{where}]\n{exc_type}: {message}")


def worker_name(rank, tp):
    """vLLM's worker process name: ``Worker``, with ``_TP<r>`` only when TP > 1."""
    return f"Worker_TP{rank}" if tp > 1 else "Worker"


def set_comm(title):
    """prctl(PR_SET_NAME): the kernel keeps 15 bytes, as with setproctitle."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def python_executable():
    # Children started with argv[0] = "VLLM::..." have an empty sys.executable.
    return sys.executable or os.readlink("/proc/self/exe")


def spawn_titled(title, role, config):
    """Start this script as a child whose /proc/PID/cmdline begins with title;
    its config goes over the returned channel (never on a command line)."""
    import subprocess
    chan, child = channel_pair()
    proc = subprocess.Popen([title, SCRIPT, role, str(child.fileno())],
                            executable=python_executable(), pass_fds=(child.fileno(),))
    child.close()
    chan.send(config)
    return proc, chan


# --------------------------------------------------------------------------
# A JSON-lines channel over a socketpair (API <-> engine <-> workers)
# --------------------------------------------------------------------------

class Channel:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.send_lock = threading.Lock()

    def send(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        with self.send_lock:
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                return False

    def recv(self, timeout=None):
        """Next message; None on timeout; raises EOFError when the peer died."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                return None
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def channel_pair():
    parent, child = socket.socketpair()
    return Channel(parent), child


# --------------------------------------------------------------------------
# CLI: the flags the unit uses; unknown --flags are accepted with a notice
# --------------------------------------------------------------------------

class ConfigError(Exception):
    """A config vLLM's pydantic validation would reject (exit status 1)."""


def parse_len(text):
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"invalid length {text!r}")
    factor = {"": 1, "k": 1000, "K": 1024, "m": 10**6, "M": 2**20}[match.group(2)]
    return int(float(match.group(1)) * factor)


def parse_json_arg(text):
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(
            f"Value {text} cannot be converted to <function loads>.") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"Value {text} is not a JSON object.")
    return value


def build_parser():
    parser = argparse.ArgumentParser(prog="vllm serve", allow_abbrev=False)
    parser.add_argument("model_tag", nargs="?")
    parser.add_argument("--model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-model-len", type=parse_len)
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--tool-call-parser")
    parser.add_argument("--reasoning-parser")
    parser.add_argument("--enable-auto-tool-choice", action="store_true")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--profiler-config", type=parse_json_arg)
    parser.add_argument("--api-key")
    parser.add_argument("--disable-uvicorn-access-log", action="store_true")
    parser.add_argument("--middleware", action="append", default=[])
    parser.add_argument("--speculative-config", "-sc", type=parse_json_arg)
    parser.add_argument("--max-num-seqs", type=int)
    return parser


def split_dotted_profiler_args(unknown):
    """Pull ``--profiler-config.KEY=VALUE`` (or ``KEY VALUE``) out of unknowns."""
    dotted, rest, i = {}, [], 0
    while i < len(unknown):
        token = unknown[i]
        if token.startswith("--profiler-config."):
            key, sep, value = token[len("--profiler-config."):].partition("=")
            if not sep and i + 1 < len(unknown) and not unknown[i + 1].startswith("--"):
                value, i = unknown[i + 1], i + 1
            try:
                dotted[key] = json.loads(value)
            except json.JSONDecodeError:
                dotted[key] = value
        else:
            rest.append(token)
        i += 1
    return dotted, rest


def validate_profiler_config(raw):
    """Return the full profiler config (defaults filled in) or raise ConfigError."""
    known = {"profiler", "torch_profiler_dir", *PROFILER_BOOL_FIELDS, *PROFILER_INT_FIELDS}
    for key in raw:
        if key not in known:
            raise ConfigError(f"{key}\n  Extra inputs are not permitted "
                              f"[type=extra_forbidden, input_value={raw[key]!r}]")
    cfg = {"profiler": None, "torch_profiler_dir": "",
           **PROFILER_BOOL_FIELDS, **PROFILER_INT_FIELDS}
    for key, value in raw.items():
        if key in PROFILER_BOOL_FIELDS:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise ConfigError(f"{key}\n  Input should be a valid boolean "
                                  f"[type=bool_type, input_value={value!r}]")
        if key in PROFILER_INT_FIELDS and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ConfigError(f"{key}\n  Input should be greater than or equal to 0 "
                              f"[type=greater_than_equal, input_value={value!r}]")
        cfg[key] = value
    if cfg["profiler"] not in (None, "torch", "cuda"):
        raise ConfigError(f"profiler\n  Input should be 'torch' or 'cuda' "
                          f"[type=literal_error, input_value={cfg['profiler']!r}]")
    trace_dir = cfg["torch_profiler_dir"]
    if trace_dir and cfg["profiler"] != "torch":
        raise ConfigError("Value error, torch_profiler_dir is only applicable when "
                          "profiler is set to 'torch'")
    if cfg["profiler"] == "torch" and not trace_dir:
        raise ConfigError("Value error, torch_profiler_dir must be set when profiler "
                          "is 'torch'")
    if trace_dir and not os.path.isabs(trace_dir):
        # vLLM itself turns a relative dir into an absolute one against its
        # working directory; the stand-in refuses it (see README).
        raise ConfigError(f"Value error, torch_profiler_dir must be an absolute path, "
                          f"got {trace_dir!r}")
    return cfg


SPEC_METHODS = ("ngram", "draft_model", "eagle", "eagle3", "mtp", "suffix")
SPEC_DRAFT_DIR_METHODS = ("draft_model", "eagle", "eagle3")  # these load a draft model from "model"
SPEC_DRAFT_OVERHEAD = 0.05  # a decode step costs TPOT * (1 + K * this) when proposing K tokens


def validate_speculative_config(raw):
    """The modelled part of vLLM's SpeculativeConfig, or raise ConfigError.

    vLLM infers a missing ``method`` from ``model``; the stand-in asks for it (see README)."""
    method = raw.get("method")
    if method is None:
        raise ConfigError("speculative_config.method\n  Field required [type=missing, "
                          f"input_value={raw!r}] (stand-in: give the method)")
    if method not in SPEC_METHODS:
        allowed = ", ".join(f"'{m}'" for m in SPEC_METHODS)
        raise ConfigError(f"speculative_config.method\n  Input should be {allowed} "
                          f"[type=literal_error, input_value={method!r}]")
    k = raw.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ConfigError("speculative_config.num_speculative_tokens\n  Input should be greater "
                          f"than 0 [type=greater_than, input_value={k!r}]")
    if method in SPEC_DRAFT_DIR_METHODS and not raw.get("model"):
        raise ConfigError(f"Value error, method={method!r} needs the draft model: set "
                          "speculative_config.model")
    return {"method": method, "num_speculative_tokens": k, "model": raw.get("model")}


def spec_step_model(spec):
    """(K, accepted per step, step-time factor) of a speculating server, (0, 0, 1.0) otherwise."""
    if not spec:
        return 0, 0, 1.0
    k = spec["num_speculative_tokens"]
    acceptance = min(1.0, max(0.0, env_float("VLLM_STANDIN_SPEC_ACCEPTANCE", 0.6)))
    accepted = min(k, math.floor(k * acceptance + 0.5))  # round half up: 3 * 0.5 -> 2
    return k, accepted, 1.0 + k * SPEC_DRAFT_OVERHEAD


def check_model_dir(model):
    if not (os.path.isfile(os.path.join(model, "config.json"))
            or os.path.isfile(os.path.join(model, "params.json"))):
        raise ConfigError(
            f"Value error, Invalid repository ID or local directory specified: "
            f"'{model}'.\nPlease verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
            "   - For Mistral models: ensure the presence of a 'params.json'.")


def model_facts(model, max_model_len):
    shards = [f for f in os.listdir(model) if f.endswith(".safetensors")]
    n_shards = len(shards) or int(env_float("VLLM_STANDIN_SHARDS", 64))
    size = sum(os.path.getsize(os.path.join(model, f)) for f in shards)
    if max_model_len is None:
        try:
            with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
                max_model_len = int(json.load(fh).get("max_position_embeddings", 8192))
        except (OSError, ValueError, AttributeError, TypeError):
            max_model_len = 8192
    return max(1, n_shards), size, max_model_len


# --------------------------------------------------------------------------
# Traces: re-timed copies of real Kineto traces, or a small synthetic one
# --------------------------------------------------------------------------

def template_files():
    tdir = os.environ.get("VLLM_STANDIN_TRACE_TEMPLATES", "/opt/vllm-standin/traces")
    try:
        names = os.listdir(tdir)
    except OSError:
        return []
    ranked = []
    for name in names:
        match = re.search(r"rank(\d+)", name)
        if match and name.endswith(".json.gz"):
            ranked.append((int(match.group(1)), os.path.join(tdir, name)))
    return [path for _, path in sorted(ranked)]


def load_json_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def min_ts(trace):
    """Earliest absolute time of a trace, in ns."""
    stamps = [ev["ts"] for ev in trace.get("traceEvents", [])
              if isinstance(ev.get("ts"), (int, float))]
    return trace.get("baseTimeNanoseconds", 0) + int(min(stamps, default=0) * 1000)


def retime_template(trace, rank, world, start_ns, origin_ns, detailed=False):
    """Shift a template so that ``origin_ns`` (the earliest time over all
    templates, kept so ranks stay aligned) lands on ``start_ns``; rename the
    decode-step annotations as vLLM names them (in the detailed form with
    ``detailed``: the k-th step of the CPU annotations, and its GPU twin by
    External id, gets key length DETAILED_CONTEXT + k); stamp this rank."""
    base_old = trace.get("baseTimeNanoseconds", 0)
    base_new = start_ns // 10**9 * 10**9
    shift_us = (base_old - base_new + start_ns - origin_ns) / 1000.0
    info = trace.setdefault("distributedInfo", {})
    t_rank = info.get("rank", rank)
    t_pid = next((ev.get("pid") for ev in trace.get("traceEvents", [])
                  if ev.get("cat") == "user_annotation"), None)
    cpu_steps = sorted((ev["ts"], (ev.get("args") or {}).get("External id"))
                       for ev in trace.get("traceEvents", [])
                       if ev.get("cat") == "user_annotation" and ev.get("name") == "decode_step")
    step_of = {ext: k for k, (_, ext) in enumerate(cpu_steps)}
    for ev in trace.get("traceEvents", []):
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] = round(ev["ts"] + shift_us, 3)
        if ev.get("cat") in ("user_annotation", "gpu_user_annotation") \
                and ev.get("name") == "decode_step":
            k = step_of.get((ev.get("args") or {}).get("External id"))
            ev["name"] = DETAILED_DECODE.format(k=DETAILED_CONTEXT + k) \
                if detailed and k is not None else DECODE_ANNOTATION
        if t_pid is not None and ev.get("pid") == t_pid:
            ev["pid"] = os.getpid()
            if ev.get("tid") == t_pid:
                ev["tid"] = os.getpid()
        args = ev.get("args")
        if isinstance(args, dict) and args.get("device") == t_rank:
            args["device"] = rank
            if ev.get("pid") == t_rank:
                ev["pid"] = rank
        elif ev.get("ph") == "M" and ev.get("pid") == t_rank and isinstance(args, dict) \
                and args.get("labels") == f"GPU {t_rank}":
            ev["pid"], args["labels"] = rank, f"GPU {rank}"
    trace["baseTimeNanoseconds"] = base_new
    info.update(rank=rank, world_size=world)
    for group in info.get("pg_config", []) or []:
        group.update(pg_size=world, ranks=list(range(world)))
    return trace


def synthetic_trace(rank, world, start_ns, title, steps=4):
    """Schema-valid Kineto-like trace: decode steps with a gemm and an
    NCCL all-reduce kernel each."""
    pid = os.getpid()
    base = start_ns // 10**9 * 10**9
    t = (start_ns - base) / 1000.0
    events = [
        {"name": "process_name", "ph": "M", "ts": t, "pid": pid, "tid": 0,
         "args": {"name": title}},
        {"name": "process_labels", "ph": "M", "ts": t, "pid": rank, "tid": 0,
         "args": {"labels": f"GPU {rank}"}},
    ]
    kernels = [("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT", 52.0),
               ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                18.0 + 9.0 * rank)]
    corr = 1
    for step in range(steps):
        t0 = t + step * 400.0
        events.append({"ph": "X", "cat": "user_annotation", "name": DECODE_ANNOTATION,
                       "pid": pid, "tid": pid, "ts": t0, "dur": 300.0,
                       "args": {"External id": corr}})
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": DECODE_ANNOTATION,
                       "pid": rank, "tid": 7, "ts": t0 + 20.0, "dur": 120.0,
                       "args": {"External id": corr, "device": rank}})
        k_ts = t0 + 25.0
        for name, dur in kernels:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": pid, "tid": pid, "ts": k_ts - 10.0, "dur": 4.0,
                           "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank,
                           "tid": 7, "ts": k_ts, "dur": dur,
                           "args": {"device": rank, "stream": 7, "correlation": corr}})
            k_ts += dur + 2.0
            corr += 1
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": rank, "name": "NVIDIA H200",
                                  "totalGlobalMem": 150109880320}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "displayTimeUnit": "ms", "baseTimeNanoseconds": base,
            "traceEvents": events, "traceName": ""}


def cuda_time_table(trace):
    """A torch key_averages()-style table sorted by self CUDA time."""
    totals = {}
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") == "kernel":
            dur, calls = totals.get(ev["name"], (0.0, 0))
            totals[ev["name"]] = (dur + float(ev.get("dur", 0)), calls + 1)
    grand = sum(d for d, _ in totals.values()) or 1.0
    rule = "-" * 57 + "  " + "  ".join(["-" * 12] * 4)
    rows = [rule, f"{'Name':>57}  {'Self CUDA':>12}  {'Self CUDA %':>12}  "
            f"{'CUDA total':>12}  {'# of Calls':>12}", rule]
    for name, (dur, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:100]:
        short = name if len(name) <= 57 else name[:54] + "..."
        rows.append(f"{short:>57}  {dur / 1000:>10.3f}ms  {100 * dur / grand:>11.2f}%  "
                    f"{dur / 1000:>10.3f}ms  {calls:>12}")
    cpu = sum(float(ev.get("dur", 0)) for ev in trace.get("traceEvents", [])
              if ev.get("cat") in ("cpu_op", "cuda_runtime"))
    rows += [rule, f"Self CPU time total: {cpu / 1000:.3f}ms",
             f"Self CUDA time total: {grand / 1000:.3f}ms"]
    return "\n".join(rows) + "\n"


def write_profiler_table(trace_dir, worker, table, print_it):
    """``<worker>.profiler_out.txt`` next to the trace; local rank 0 also
    print()s it (to stdout, so with no process prefix)."""
    with open(os.path.join(trace_dir, f"{worker}.profiler_out.txt"), "w",
              encoding="utf-8") as fh:
        print(table, file=fh)
    if print_it:
        with _OUT_LOCK:
            print(table, flush=True)


def write_trace_file(path, trace, gz, truncate):
    data = json.dumps(trace).encode()
    if gz:
        data = gzip.compress(data, compresslevel=6)
    if truncate:
        data = data[: max(1, len(data) // 2)]
    with open(path, "wb") as fh:
        fh.write(data)


# --------------------------------------------------------------------------
# Worker process: VLLM::Worker_TP<r>
# --------------------------------------------------------------------------

class Worker:
    def __init__(self, cfg, chan):
        self.cfg, self.chan = cfg, chan
        self.rank = cfg["rank"]
        self.claim_path = None
        self.device_fd = None
        self.profile = None  # the running profile's start message
        self.profiler_made = False  # vLLM makes the worker's profiler at the first start
        self.stopped_once = False

    def device_path(self):
        index = self.rank
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        if self.rank < len(visible) and visible[self.rank].isdigit():
            index = int(visible[self.rank])
        pattern = os.environ.get("VLLM_STANDIN_DEVICE_PATTERN", "/dev/nvidia{rank}")
        return pattern.format(rank=index)

    def on_sigterm(self, signum, _frame):
        if fault_names_rank("worker-ignores-sigterm", self.rank):
            log("WARNING", "multiproc_executor.py:702",
                f"Received {signal.Signals(signum).name}; ignoring it "
                "(stand-in fault worker-ignores-sigterm)")
            return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second TERM during exit
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise SystemExit(0)

    def start(self):
        path = self.device_path()
        try:
            self.device_fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            log("ERROR", "multiproc_executor.py:671", "WorkerProc failed to start.")
            fail_with_traceback("RuntimeError",
                                f"No CUDA GPUs are available (cannot open {path}: {exc.strerror})",
                                "gpu_worker.py:214")
            self.chan.send({"ev": "failed", "rank": self.rank})
            return False
        self.write_claim()
        self.chan.send({"ev": "up", "rank": self.rank})
        return True

    def write_claim(self):
        claim_dir = os.environ.get("GPU_SIM_CLAIM_DIR", "/run/gpu-sim")
        mib = int(self.cfg["gpu_memory_utilization"] * env_float("GPU_SIM_TOTAL_MIB", 143771))
        path = os.path.join(claim_dir, str(os.getpid()))
        try:
            os.makedirs(claim_dir, exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f"{mib}\n")
            self.claim_path = path
        except OSError as exc:
            log("WARNING", "vllm_standin", f"cannot write GPU memory claim {path}: {exc}")

    def load(self):
        """Simulate loading the shards; rank 0 prints tqdm-style progress.
        Returns False when the engine went away during the load."""
        total, load_s = self.cfg["shards"], self.cfg["load_s"] * 0.85
        per_shard = load_s / total
        t0 = time.monotonic()
        if self.rank == 0:
            self.progress(0, total, 0.0)
        for n in range(1, total + 1):
            if not self.engine_alive(max(0.0, t0 + n * per_shard - time.monotonic())):
                return False
            if self.rank == 0:
                self.progress(n, total, time.monotonic() - t0)
        took = time.monotonic() - t0
        if self.rank == 0:
            gib = self.cfg["weights_bytes"] / self.cfg["tp"] / 2**30 or 72.37
            log("INFO", "default_loader.py:291", f"Loading weights took {took:.2f} seconds")
            log("INFO", "gpu_model_runner.py:2912",
                f"Model loading took {gib:.4f} GiB memory and {took + 0.4:.6f} seconds")
        return True

    def engine_alive(self, wait):
        """Sleep up to ``wait`` s; False if the engine's end of the pipe closed."""
        ready, _, _ = select.select([self.chan.sock], [], [], wait)
        if ready:
            try:
                return bool(self.chan.sock.recv(1, socket.MSG_PEEK))
            except OSError:
                return False
        return True

    @staticmethod
    def progress(n, total, elapsed):
        rate = n / elapsed if elapsed > 0 and n else 0.0
        remaining = fmt_interval((total - n) / rate) if rate else "?"
        if not rate:
            rate_fmt = "?it/s"
        elif rate < 1:
            rate_fmt = f"{1 / rate:5.2f}s/it"
        else:
            rate_fmt = f"{rate:5.2f}it/s"
        line = (f"Loading safetensors checkpoint shards: {100 * n / total:3.0f}% Completed "
                f"| {n}/{total} [{fmt_interval(elapsed)}<{remaining}, {rate_fmt}]")
        # tqdm writes "\r" + bar_format, and vLLM's bar_format ends in "\n";
        # closing the bar adds one more "\n".
        with _OUT_LOCK:
            sys.stderr.write("\r" + line + "\n" + ("\n" if n == total else ""))
            sys.stderr.flush()

    def serve(self):
        while True:
            try:
                msg = self.chan.recv()
            except EOFError:
                return  # the engine is gone: vLLM workers watch a death pipe
            if msg["cmd"] == "start_profile":
                self.start_profile(msg)
                self.chan.send({"id": msg["id"], "ok": True})
            elif msg["cmd"] == "stop_profile":
                self.stop_profile()
                self.chan.send({"id": msg["id"], "ok": True})

    def start_profile(self, msg):
        if not self.profiler_made and self.rank == 0 \
                and self.cfg["profiler"]["profiler"] == "torch":
            log("INFO", "wrapper.py:243", "Torch profiling enabled. Traces will be saved to: "
                + self.cfg["profiler"]["torch_profiler_dir"])
        self.profiler_made = True
        self.profile = self.profile or msg  # a start while active is ignored

    def stop_profile(self):
        if not self.profiler_made:
            log("WARNING", "gpu_worker.py:1411", "Profiler was not started, nothing to stop.")
            return
        prof, self.profile = self.profile, None
        pcfg = self.cfg["profiler"]
        if prof is None or pcfg["profiler"] != "torch":
            return  # not active: vLLM's worker profiler ignores the stop
        time.sleep(env_float("VLLM_STANDIN_FLUSH_S", 0.5))
        trace_dir = pcfg["torch_profiler_dir"]
        try:
            os.makedirs(trace_dir, exist_ok=True)
        except OSError:
            log("WARNING", "wrapper.py:82",
                f"Failed to stop profiler: Can't create directory: {trace_dir}")
            return
        trace = self.make_trace(prof["start_ns"], pcfg["detailed_trace_annotation"])
        r = self.rank
        worker = f"dp0_pp0_tp{r}_dcp0_ep0_rank{r}"  # get_worker_rank_suffix on a GPU host
        if prof.get("prefix"):
            worker = f"{prof['prefix']}_{worker}"
        name = f"{worker}.{time.time_ns()}.pt.trace.json"
        gz = pcfg["torch_profiler_use_gzip"]
        path = os.path.join(trace_dir, name + (".gz" if gz else ""))
        trace["traceName"] = path
        write_trace_file(path, trace, gz, fault(f"truncate-trace-rank-{r}") is not None)
        if pcfg["torch_profiler_dump_cuda_time_total"]:
            write_profiler_table(trace_dir, worker, cuda_time_table(trace), print_it=r == 0)
        if not self.stopped_once:
            log("INFO", "wrapper.py:98", "Profiler stopped successfully.")
        self.stopped_once = True

    def make_trace(self, start_ns, detailed=False):
        files = template_files()
        world = self.cfg["tp"]
        if not files:
            trace = synthetic_trace(self.rank, world, start_ns,
                                    f"VLLM::{worker_name(self.rank, world)}")
        else:
            template = load_json_gz(files[self.rank % len(files)])
            origin = min(min_ts(load_json_gz(path)) for path in files) if len(files) > 1 \
                else min_ts(template)
            trace = retime_template(template, self.rank, world, start_ns, origin, detailed)
        # vLLM stamps its version into every trace it writes
        trace.update(vllm_version=VERSION, vllm_version_tuple=VERSION.split("."))
        return trace

    def cleanup(self):
        if self.claim_path:
            with contextlib.suppress(OSError):
                os.unlink(self.claim_path)
        if self.device_fd is not None:
            os.close(self.device_fd)


def fmt_interval(seconds):
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def worker_main(cfg, chan):
    global _LABEL
    _LABEL = worker_name(cfg["rank"], cfg["tp"])
    set_comm(f"VLLM::{_LABEL}")
    worker = Worker(cfg, chan)
    signal.signal(signal.SIGTERM, worker.on_sigterm)
    signal.signal(signal.SIGINT, worker.on_sigterm)
    try:
        if not worker.start():
            return 1
        if worker.load():
            worker.chan.send({"ev": "loaded", "rank": worker.rank})
            worker.serve()
        return 0
    finally:
        worker.cleanup()


# --------------------------------------------------------------------------
# EngineCore process: VLLM::EngineCore
# --------------------------------------------------------------------------

class EngineShutdown(Exception):
    pass


class Engine:
    def __init__(self, cfg, api):
        self.cfg, self.api = cfg, api
        self.workers = []  # (proc, channel)

    def die(self, where, message, during_load):
        log("ERROR", "core.py:713" if during_load else "core.py:798",
            "EngineCore failed to start." if during_load
            else "EngineCore encountered a fatal error.")
        fail_with_traceback("RuntimeError", message, where)
        sys.stdout.flush()
        os._exit(1)

    def start_workers(self):
        for rank in range(self.cfg["tp"]):
            title = f"VLLM::{worker_name(rank, self.cfg['tp'])}"
            self.workers.append(spawn_titled(title, "--internal-worker",
                                             {**self.cfg, "rank": rank}))

    def gather(self, event, timeout=None, on_wait=None):
        """Wait for ``event`` from every worker; EOF from one kills the engine."""
        pending = {rank for rank in range(len(self.workers))}
        while pending:
            for rank in sorted(pending):
                try:
                    msg = self.workers[rank][1].recv(timeout=0.1)
                except EOFError:
                    msg = {"ev": "died"}
                if msg is None:
                    continue
                if msg.get("ev") in ("failed", "died"):
                    self.die("multiproc_executor.py:560", "WorkerProc initialization "
                             f"failed (VLLM::{worker_name(rank, self.cfg['tp'])}). See stack "
                             "trace for root cause.", during_load=True)
                if msg.get("ev") == event or msg.get("id") == event:
                    pending.discard(rank)
            if on_wait:
                on_wait()

    def run(self):
        cfg = self.cfg
        log("INFO", "core.py:93",
            f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{cfg['model']}', "
            f"served_model_name={cfg['served_model_name']}, "
            f"max_seq_len={cfg['max_model_len']}, tensor_parallel_size={cfg['tp']}, "
            f"enforce_eager={cfg['enforce_eager']}, speculative_config={spec_repr(cfg.get('spec'))}")
        self.start_workers()
        self.gather("up")
        t0 = time.monotonic()

        def maybe_die_loading():
            # Part-way through the shard progress, as a real load failure would.
            if time.monotonic() - t0 >= 0.4 * cfg["load_s"] * 0.85 \
                    and fault("engine-dies-during-load") is not None:
                consume_if_once("engine-dies-during-load")
                self.die("gpu_model_runner.py:2890",
                         "CUDA error: an illegal memory access was encountered "
                         "(stand-in fault engine-dies-during-load)", during_load=True)

        self.gather("loaded", on_wait=maybe_die_loading)
        self.load_draft_model()
        mib = int(cfg["gpu_memory_utilization"] * env_float("GPU_SIM_TOTAL_MIB", 143771))
        time.sleep(cfg["load_s"] * 0.15)
        log("INFO", "gpu_worker.py:298", f"Available KV cache memory: {mib / 1024 * 0.4:.2f} GiB")
        log("INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {mib * 12:,} tokens")
        log("INFO", "core.py:402", "init engine (profile, create kv cache, warmup model) "
            f"took {time.monotonic() - t0:.2f} s")
        self.api.send({"ev": "ready"})
        self.serve()

    def load_draft_model(self):
        """A draft model (draft_model, eagle, eagle3) is loaded after the target's weights; a
        path that is not a directory fails the load as transformers does, and the engine dies."""
        spec = self.cfg.get("spec")
        if not spec or spec["method"] not in SPEC_DRAFT_DIR_METHODS:
            return
        path = spec["model"]
        log("INFO", "eagle.py:1187" if spec["method"].startswith("eagle") else "draft_model.py:84",
            f"Loading drafter model ({spec['method']}) from {path}")
        if not os.path.isdir(path):
            log("ERROR", "core.py:713", "EngineCore failed to start.")
            fail_with_traceback("OSError", f"Incorrect path_or_model_id: '{path}'. Please provide "
                                "either the path to a local folder or the repo_id of a model on "
                                "the Hub. (stand-in: speculative_config.model, the draft model, "
                                "is missing)", "gpu_model_runner.py:2957")
            sys.stdout.flush()
            os._exit(1)
        log("INFO", "gpu_model_runner.py:2912", "Loading drafter model weights took 0.10 seconds")

    def serve(self):
        api_alive = True
        while True:
            socks = [chan.sock for _, chan in self.workers]
            if api_alive:
                socks.append(self.api.sock)
            ready, _, _ = select.select(socks, [], [], 0.5)
            if fault("engine-dies") is not None:
                self.die("core.py:801", "CUDA error: unspecified launch failure "
                         "(stand-in fault engine-dies)", during_load=False)
            for rank, (_, chan) in enumerate(self.workers):
                if chan.sock in ready:
                    try:
                        chan.recv(timeout=0)
                    except EOFError:
                        proc = self.workers[rank][0]
                        try:
                            code = proc.wait(timeout=1)
                        except Exception:  # subprocess.TimeoutExpired
                            code = None
                        log("ERROR", "multiproc_executor.py:316", f"Worker proc VllmWorker-"
                            f"{rank} died unexpectedly (exit code: {code}), shutting down "
                            "executor.")
                        self.die("core.py:801", "Executor failed.", during_load=False)
            if self.api.sock in ready or (api_alive and self.api.buf):
                try:
                    msg = self.api.recv(timeout=0)
                except EOFError:
                    # The API server is gone (e.g. SIGKILL). vLLM's EngineCore does
                    # not notice promptly: keep running and keep the workers.
                    api_alive = False
                    continue
                if msg:
                    self.forward(msg)

    def forward(self, msg):
        for _, chan in self.workers:
            chan.send(msg)
        self.gather(msg["id"])
        self.api.send({"id": msg["id"], "ok": True})

    def shutdown(self):
        procs = [proc for proc, _ in self.workers if proc.poll() is None]
        for proc in procs:
            proc.terminate()
        deadline = time.monotonic() + env_float("VLLM_STANDIN_WORKER_STOP_S", 4.0)
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.1)
        for proc in procs:
            if proc.poll() is None:
                log("WARNING", "multiproc_executor.py:408",
                    f"Worker pid {proc.pid} did not exit after SIGTERM; sending SIGKILL")
                proc.kill()
            proc.wait()


def spec_repr(spec):
    if not spec:
        return None
    model = f"'{spec['model']}'" if spec.get("model") else None
    return (f"SpeculativeConfig(method='{spec['method']}', model={model}, "
            f"num_spec_tokens={spec['num_speculative_tokens']})")


def engine_main(cfg, chan):
    global _LABEL
    _LABEL = "EngineCore_DP0"
    set_comm("VLLM::EngineCore")
    engine = Engine(cfg, chan)

    def on_signal(_signum, _frame):
        raise EngineShutdown

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        engine.run()
    except EngineShutdown:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        engine.shutdown()
    return 0


# --------------------------------------------------------------------------
# API server: metrics, HTTP handler, engine link
# --------------------------------------------------------------------------

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
TOKEN_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
               50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


class Histogram:
    def __init__(self, name, doc, buckets):
        self.name, self.doc, self.buckets = name, doc, buckets
        self.counts = [0] * len(buckets)
        self.sum, self.count = 0.0, 0

    def observe(self, value, times=1):
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += times
        self.sum += value * times
        self.count += times

    def render(self, labels, created):
        out = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} histogram"]
        for bound, count in zip(self.buckets, self.counts, strict=True):
            out.append(f"{self.name}_bucket{labels(le=bound)} {float(count)}")
        out.append(f"{self.name}_bucket{labels(le='+Inf')} {float(self.count)}")
        out.append(f"{self.name}_count{labels()} {float(self.count)}")
        out.append(f"{self.name}_sum{labels()} {self.sum}")
        out += [f"# HELP {self.name}_created {self.doc}",
                f"# TYPE {self.name}_created gauge", f"{self.name}_created{labels()} {created}"]
        return out


FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


class Metrics:
    def __init__(self, model_name, speculative=False):
        self.model_name = model_name
        self.lock = threading.Lock()
        self.created = time.time()
        self.prompt_tokens = self.generation_tokens = self.success = 0
        self.running = self.waiting = 0
        self.speculative = speculative  # vLLM has the spec_decode families only then
        self.drafts = self.draft_tokens = self.accepted = 0
        self.accepted_per_pos = {}
        self.hists = [
            Histogram("vllm:time_to_first_token_seconds",
                      "Histogram of time to first token in seconds.", TTFT_BUCKETS),
            Histogram("vllm:inter_token_latency_seconds",
                      "Histogram of inter-token latency in seconds.", TOKEN_BUCKETS),
            Histogram("vllm:request_time_per_output_token_seconds",
                      "Histogram of time_per_output_token_seconds per request.",
                      TOKEN_BUCKETS),
            Histogram("vllm:e2e_request_latency_seconds",
                      "Histogram of e2e request latency in seconds.", E2E_BUCKETS),
        ]

    def finished(self, prompt_tokens, out_tokens, ttft, tpot, e2e, steps=None, step_s=None):
        """One finished request; ``steps`` decode steps of ``step_s`` each (default: one per
        token after the first, of ``tpot``), as vLLM observes the inter-token latency per step."""
        steps = out_tokens - 1 if steps is None else steps
        step_s = tpot if step_s is None else step_s
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += out_tokens
            self.success += 1
            ttft_h, itl_h, tpot_h, e2e_h = self.hists
            ttft_h.observe(ttft)
            if out_tokens > 1:
                itl_h.observe(step_s, steps)
                tpot_h.observe(tpot)
            e2e_h.observe(e2e)

    def speculated(self, steps, k, accepted):
        """``steps`` verification steps, each of ``k`` draft tokens of which ``accepted``."""
        with self.lock:
            self.drafts += steps
            self.draft_tokens += steps * k
            self.accepted += steps * accepted
            for pos in range(k):
                self.accepted_per_pos[pos] = self.accepted_per_pos.get(pos, 0) + (
                    steps if pos < accepted else 0)

    def labels(self, **extra):
        """Prometheus labels, sorted by name as prometheus_client prints them."""
        pairs = {"engine": "0", "model_name": self.model_name, **extra}
        return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"

    def render(self):
        lb = self.labels
        with self.lock:
            out = []
            for name, doc, value in (
                    ("vllm:num_requests_running", "Number of requests in model execution "
                     "batches.", self.running),
                    ("vllm:num_requests_waiting", "Number of requests waiting to be "
                     "processed.", self.waiting),
                    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent "
                     "usage.", 0.01 * self.running)):
                out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge",
                        f"{name}{lb()} {float(value)}"]
            reasons = [{"finished_reason": r} for r in FINISHED_REASONS]
            for name, doc, series in (
                    ("vllm:prompt_tokens", "Number of prefill tokens processed.",
                     [({}, self.prompt_tokens)]),
                    ("vllm:generation_tokens", "Number of generation tokens processed.",
                     [({}, self.generation_tokens)]),
                    ("vllm:request_success", "Count of successfully processed requests.",
                     [(r, self.success if r["finished_reason"] == "length" else 0)
                      for r in reasons]),
                    ("vllm:num_preemptions", "Cumulative number of preemption from the "
                     "engine.", [({}, 0)]),
                    *self.spec_counters()):
                out += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
                out += [f"{name}_total{lb(**extra)} {float(value)}" for extra, value in series]
                out += [f"# HELP {name}_created {doc}", f"# TYPE {name}_created gauge"]
                out += [f"{name}_created{lb(**extra)} {self.created}" for extra, _ in series]
            for hist in self.hists:
                out += hist.render(lb, self.created)
        return "\n".join(out) + "\n"


    def spec_counters(self):
        if not self.speculative:
            return []
        return [("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
                 [({}, self.drafts)]),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
                 [({}, self.draft_tokens)]),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
                 [({}, self.accepted)]),
                ("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft "
                 "position.", [({"position": str(pos)}, n)
                               for pos, n in sorted(self.accepted_per_pos.items())])]


class Seqs:
    """--max-num-seqs: at most ``limit`` requests generate at once (None: no limit); the
    others wait in arrival order, counted in vllm:num_requests_waiting."""

    def __init__(self, limit):
        self.limit = limit
        self.sem = threading.Semaphore(limit) if limit else None

    @contextlib.contextmanager
    def slot(self, metrics):
        """Yields the seconds spent waiting for a slot."""
        if self.sem is None:
            yield 0.0
            return
        t0 = time.monotonic()
        with metrics.lock:
            metrics.waiting += 1
        try:
            self.sem.acquire()
        finally:
            with metrics.lock:
                metrics.waiting -= 1
        try:
            yield time.monotonic() - t0
        finally:
            self.sem.release()


class EngineLink:
    """The API server's side of the EngineCore process."""

    def __init__(self, cfg):
        self.proc, self.chan = spawn_titled("VLLM::EngineCore", "--internal-engine", cfg)
        self.ready = threading.Event()
        self.dead = threading.Event()
        self.dead_at = None
        self.stopping = False
        self.lock = threading.Lock()
        self.next_id = 0
        self.replies = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                msg = self.chan.recv()
            except (EOFError, OSError, ValueError):
                break
            if msg.get("ev") == "ready":
                self.ready.set()
            elif "id" in msg:
                with self.lock:
                    slot = self.replies.get(msg["id"])
                if slot:
                    slot[1] = msg
                    slot[0].set()
        self.dead_at = time.monotonic()
        self.dead.set()
        if self.ready.is_set() and not self.stopping:
            log("WARNING", "core_client.py:817", "[shutdown] MPClient: engine core exited "
                "unexpectedly; starting cleanup")
            for line in ("AsyncLLM output_handler failed.",
                         "Traceback (most recent call last):",
                         f'  File "{SCRIPT}", line 1, in output_handler',
                         "    outputs = await engine_core.get_output_async()",
                         f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD}"):
                log("ERROR", "async_llm.py:906", line)
        with self.lock:
            for slot in self.replies.values():
                slot[0].set()

    def call(self, cmd, **fields):
        """Send a command to the engine and wait (unbounded) for its answer;
        False when the engine died first."""
        with self.lock:
            self.next_id += 1
            ident = self.next_id
            slot = self.replies[ident] = [threading.Event(), None]
        if self.dead.is_set() or not self.chan.send({"id": ident, "cmd": cmd, **fields}):
            return False
        slot[0].wait()
        with self.lock:
            del self.replies[ident]
        return slot[1] is not None

    def terminate(self):
        self.stopping = True
        if self.proc.poll() is None:
            self.proc.terminate()
        limit = env_float("VLLM_STANDIN_WORKER_STOP_S", 4.0) + 6.0
        try:
            self.proc.wait(timeout=limit)
        except Exception:  # subprocess.TimeoutExpired
            self.proc.kill()
            self.proc.wait()


class Profiling:
    """The API server's profiling session, as vLLM's AsyncLLM keeps it: start
    and stop are serialized by one lock; a start while a session is active is
    a 409; a stop is always passed on to the engine and answered 200."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.lock = threading.Lock()
        self.active = False
        self.started_ns = None
        self.prefix = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    # -- plumbing ---------------------------------------------------------
    def log_message(self, fmt, *args):
        pass

    def log_request(self, code="-", size="-"):
        if self.server.app["access_log"]:
            status = int(code) if str(code).isdigit() else 0
            phrase = HTTPStatus(status).phrase if status else ""
            uvicorn_log(f'{self.client_address[0]}:{self.client_address[1]} - '
                        f'"{self.command} {self.path} {self.request_version}" {code} {phrase}')

    def reply(self, status, body=b"", ctype="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        if body or ctype == "application/json":
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, message, etype, param=None):
        self.reply(status, {"error": {"message": sanitize_message(message), "type": etype,
                                      "param": param, "code": status}})

    def read_json(self, optional=False):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw.strip() and optional:
            return {}
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            self.error(400, "Invalid JSON body.", "BadRequestError")
            return None
        return body

    def authorized(self):
        key = self.server.app["api_key"]
        if not key or self.command == "OPTIONS" \
                or not self.path.split("?")[0].startswith(PROTECTED_PREFIXES):
            return True
        given = self.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            return True
        self.reply(401, {"error": "Unauthorized"})
        return False

    def through_middlewares(self):
        """Run the request's scope through each --middleware (outermost first, as vLLM adds
        them last); False when one answered it itself. Modelled: gatekeeper middlewares, which
        either pass the scope on or answer; the answer is written as the middleware sent it."""
        for middleware in self.server.app["middlewares"]:
            state = {"passed": False}
            sent = []
            path, _, query = self.path.partition("?")
            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": self.command,
                     "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
                     "root_path": "", "client": tuple(self.client_address[:2]),
                     "server": tuple(self.server.server_address[:2]),
                     "headers": [(k.lower().encode(), v.encode()) for k, v in self.headers.items()],
                     "extensions": {"vllm_standin": state}}

            async def receive():
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message, sent=sent):
                sent.append(message)

            asyncio.run(middleware(scope, receive, send))
            if state["passed"]:
                continue
            start = next((m for m in sent if m["type"] == "http.response.start"), None)
            if start is None:
                self.reply(500, "Internal Server Error", "text/plain")
                return False
            self.send_response(start["status"])
            for key, value in start.get("headers", []):
                self.send_header(key.decode(), value.decode())
            self.end_headers()
            self.wfile.write(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))
            return False
        return True

    def route(self, method):
        if not self.through_middlewares() or not self.authorized():
            return
        path = self.path.split("?")[0]
        routes = self.server.app["routes"]
        if path not in routes:
            self.reply(404, {"detail": "Not Found"})
        elif method not in routes[path]:
            self.reply(405, {"detail": "Method Not Allowed"})
        else:
            getattr(self, routes[path][method])()

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    # -- endpoints ----------------------------------------------------------
    def health(self):
        self.reply(503 if self.server.app["engine"].dead.is_set() else 200, b"", "")

    def version(self):
        self.reply(200, {"version": VERSION})

    def models(self):
        app = self.server.app
        self.reply(200, {"object": "list", "data": [{
            "id": app["model_name"], "object": "model", "created": int(time.time()),
            "owned_by": "vllm", "root": app["model"], "parent": None,
            "max_model_len": app["max_model_len"],
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                            "created": int(time.time()), "allow_create_engine": False,
                            "allow_sampling": True, "allow_logprobs": True,
                            "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}]})

    def metrics(self):
        self.reply(200, self.server.app["metrics"].render(),
                   "text/plain; version=0.0.4; charset=utf-8")

    def completions(self):
        app = self.server.app
        body = self.read_json()
        if body is None:
            return
        model = body.get("model", app["model_name"])
        if model not in (app["model_name"], app["model"]):
            return self.error(404, f"The model `{model}` does not exist. Valid aliases: "
                              f"{app['model_name']}.", "NotFoundError", "model")
        prompts = body.get("prompt")
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                        and all(isinstance(t, int) for t in prompts)):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts:
            return self.error(400, "prompt must be a string, a list of strings or a list "
                              "of token ids", "BadRequestError")
        max_tokens = body.get("max_tokens")
        max_tokens = 16 if max_tokens is None else max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return self.error(400, "max_tokens must be at least 1, got "
                              f"{max_tokens}.", "BadRequestError")
        limit = app["max_model_len"]
        if max_tokens > limit:
            return self.error(400, f"max_tokens={max_tokens} cannot be greater than "
                              f"max_model_len={limit}. Please request fewer output tokens. "
                              f"(parameter=max_tokens, value={max_tokens})",
                              "BadRequestError", "max_tokens")
        counts = [len(p) if isinstance(p, list) else max(1, len(str(p).split()))
                  for p in prompts]
        if max(counts) > limit:  # vLLM's tokenizer stops at limit + 1 tokens
            return self.error(400, f"This model's maximum context length is {limit} tokens. "
                              f"However, your prompt contains at least {limit + 1} input "
                              "tokens, which exceeds this limit even without any output "
                              "tokens. Please reduce the length of the input prompt. "
                              f"(parameter=input_tokens, value={limit + 1})",
                              "BadRequestError", "input_tokens")
        # vLLM cuts max_tokens to what fits after the prompt; no error for that
        max_tokens = min(max_tokens, limit - max(counts))
        if app["engine"].dead.is_set():
            return self.error(500, ENGINE_DEAD, "EngineDeadError")
        generate = Generation(app, body, prompts, counts, max_tokens)
        if body.get("stream"):
            generate.stream(self)
        else:
            generate.whole(self)

    def start_profile(self):
        app = self.server.app
        body = self.read_json(optional=True)
        if body is None:
            return
        prof = app["profiling"]
        log("INFO", "api_router.py:39", "Starting profiler...")
        with prof.lock:
            if prof.active:
                return self.error(409, "A profiling session is already active. Call "
                                  "/stop_profile before starting another session.", "Conflict")
            start_ns = time.time_ns()
            prefix = body.get("profile_prefix")
            ok = app["engine"].call("start_profile", start_ns=start_ns, prefix=prefix)
            prof.active, prof.started_ns, prof.prefix = ok, start_ns, prefix
        if not ok:
            return self.error(500, ENGINE_DEAD, "EngineDeadError")
        log("INFO", "api_router.py:44", "Profiler started.")
        self.reply(200, b"", "")

    def stop_profile(self):
        app = self.server.app
        prof = app["profiling"]
        log("INFO", "api_router.py:50", "Stopping profiler...")
        with prof.lock:
            if fault("stop-profile-hangs") is not None:
                time.sleep(3600)
            ok = app["engine"].call("stop_profile")
            if ok and prof.active:
                write_frontend_trace(prof.cfg, prof.started_ns, prof.prefix)
            prof.active = False
        if not ok:
            return self.error(500, ENGINE_DEAD, "EngineDeadError")
        log("INFO", "api_router.py:52", "Profiler stopped.")
        self.reply(200, b"", "")


FAKE_WORDS = [
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "tensor", "parallel", "ranks",
    "reduce", "their", "partial", "sums", "and", "the", "scheduler", "streams", "tokens",
]


class Generation:
    """One completion request, with simulated time to first token and per decode step.

    The first token comes from the prefill, after TTFT. Then each decode step takes TPOT and
    emits one token; a speculating server (K draft tokens, ``a`` accepted per step, see
    spec_step_model) takes TPOT * (1 + K * SPEC_DRAFT_OVERHEAD) a step and emits 1 + a tokens
    (the last step only what is left), so ceil((n - 1) / (1 + a)) steps for n tokens. A stream
    sends one chunk per step, as vLLM does."""

    def __init__(self, app, body, prompts, counts, max_tokens):
        self.app, self.prompts, self.counts, self.n = app, prompts, counts, max_tokens
        self.ttft = env_float("VLLM_STANDIN_TTFT_MS", 20.0) / 1000
        self.k, self.accepted, factor = app["spec"]
        self.step_s = env_float("VLLM_STANDIN_TPOT_MS", 5.0) / 1000 * factor
        self.steps = max(0, math.ceil((self.n - 1) / (1 + self.accepted)))
        self.tpot = self.step_s * self.steps / (self.n - 1) if self.k and self.n > 1 \
            else self.step_s
        self.queued = 0.0
        self.ident = f"cmpl-{uuid.uuid4().hex[:16]}"
        self.created = int(time.time())
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.rng = random.Random(json.dumps(prompts, sort_keys=True))

    def chunks(self):
        """Yield the tokens of each step (a list) in simulated time."""
        self.t0 = time.monotonic()
        metrics = self.app["metrics"]
        with self.app["seqs"].slot(metrics) as waited:
            self.queued = waited
            with metrics.lock:
                metrics.running += 1
            try:
                time.sleep(self.ttft)
                if self.n > 0:
                    yield [self.word()]
                left = self.n - 1
                while left > 0:
                    time.sleep(self.step_s)
                    size = min(left, 1 + self.accepted)
                    left -= size
                    yield [self.word() for _ in range(size)]
            finally:
                with metrics.lock:
                    metrics.running -= 1

    def word(self):
        return " " + self.rng.choice(FAKE_WORDS)

    def record(self):
        e2e = time.monotonic() - self.t0
        metrics = self.app["metrics"]
        for count in self.counts:
            metrics.finished(count, self.n, self.ttft + self.queued, self.tpot, e2e,
                             self.steps, self.step_s)
            if self.k:
                metrics.speculated(self.steps, self.k, self.accepted)

    def usage(self):
        prompt = sum(self.counts)
        return {"prompt_tokens": prompt, "total_tokens": prompt + self.n * len(self.prompts),
                "completion_tokens": self.n * len(self.prompts)}

    def whole(self, handler):
        text = "".join("".join(step) for step in self.chunks())
        choices = [{"index": i, "text": text, "logprobs": None, "finish_reason": "length",
                    "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
                    "prompt_token_ids": None, "routed_experts": None}
                   for i in range(len(self.prompts))]
        self.record()
        handler.reply(200, {"id": self.ident, "object": "text_completion",
                            "created": self.created, "model": self.app["model_name"],
                            "choices": choices, "service_tier": None,
                            "system_fingerprint": FINGERPRINT,
                            "usage": {**self.usage(), "prompt_tokens_details": None,
                                      "completion_tokens_details": None},
                            "kv_transfer_params": None, "ec_transfer_params": None,
                            "metrics": None})

    def stream(self, handler):
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()

        def send(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj))
                    + "\n\n").encode()
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        base = {"id": self.ident, "object": "text_completion", "created": self.created,
                "model": self.app["model_name"]}
        sent = 0
        for step in self.chunks():
            sent += len(step)
            last = sent == self.n
            send({**base, "choices": [
                {"index": k, "text": "".join(step), "logprobs": None,
                 "finish_reason": "length" if last else None, "stop_reason": None,
                 "prompt_token_ids": None, "token_ids": None}
                for k in range(len(self.prompts))]})
        self.record()
        if self.include_usage:
            send({**base, "choices": [], "usage": self.usage(),
                  "system_fingerprint": FINGERPRINT})
        send("[DONE]")
        handler.wfile.write(b"0\r\n\r\n")


def write_frontend_trace(pcfg, started_ns, prefix=None):
    """The API server's own (CPU) trace, unless ignore_frontend is set; its
    profiler is a torch one on local rank 0, so it writes and prints a table too."""
    if pcfg["profiler"] != "torch" or pcfg["ignore_frontend"]:
        return
    trace_dir = pcfg["torch_profiler_dir"]
    start = started_ns or time.time_ns()
    base = start // 10**9 * 10**9
    t0 = (start - base) / 1000.0
    pid = os.getpid()
    events = [{"name": "process_name", "ph": "M", "ts": t0, "pid": pid, "tid": 0,
               "args": {"name": "python3"}}]
    for i, name in enumerate(("AsyncLLM.generate", "OutputProcessor.process_outputs",
                              "Detokenizer.update")):
        events.append({"ph": "X", "cat": "python_function", "name": name, "pid": pid,
                       "tid": pid, "ts": t0 + 50.0 * i, "dur": 40.0, "args": {}})
    name = f"{socket.gethostname()}_{pid}.async_llm"
    if prefix:
        name = f"{prefix}_{name}"
    path = os.path.join(trace_dir, f"{name}.{time.time_ns()}.pt.trace.json" +
                        (".gz" if pcfg["torch_profiler_use_gzip"] else ""))
    trace = {"schemaVersion": 1, "baseTimeNanoseconds": base, "traceEvents": events,
             "traceName": path, "vllm_version": VERSION,
             "vllm_version_tuple": VERSION.split(".")}
    try:
        os.makedirs(trace_dir, exist_ok=True)
        write_trace_file(path, trace, pcfg["torch_profiler_use_gzip"], False)
        if pcfg["torch_profiler_dump_cuda_time_total"]:
            write_profiler_table(trace_dir, name, cuda_time_table(trace), print_it=True)
    except OSError as exc:
        log("WARNING", "wrapper.py:101", f"Failed to stop profiler: {exc}")


def routes(profiler_on):
    table = {
        "/health": {"GET": "health"},
        "/version": {"GET": "version"},
        "/v1/models": {"GET": "models"},
        "/v1/completions": {"POST": "completions"},
        "/metrics": {"GET": "metrics"},
    }
    if profiler_on:
        table["/start_profile"] = {"POST": "start_profile"}
        table["/stop_profile"] = {"POST": "stop_profile"}
    return table


def sanitize_message(message):
    """vLLM strips addresses, tracebacks and file paths from error messages."""
    message = re.sub(r" at 0x[0-9a-fA-F]+>", ">", message)
    message = re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>",
                     message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


def redact(args):
    shown = {k: v for k, v in vars(args).items() if v not in (None, False)}
    if "api_key" in shown:
        shown["api_key"] = "<redacted>"
    return shown


async def _inner_app(scope, receive, send):
    """What a --middleware calls to pass a request on: marks it passed (the Handler answers)."""
    scope["extensions"]["vllm_standin"]["passed"] = True


def load_middlewares(paths):
    """vLLM's --middleware: IMPORT.PATH of an ASGI class, built once around the app."""
    out = []
    for path in paths:
        module_name, _, attr = path.rpartition(".")
        module = importlib.import_module(module_name)
        obj = getattr(module, attr)
        if not inspect.isclass(obj):
            raise ValueError(f"stand-in models class middlewares only, not {path!r}")
        out.append(obj(_inner_app))
    return out


def api_main(argv):
    args, unknown = build_parser().parse_known_args(argv)
    dotted, unknown = split_dotted_profiler_args(unknown)
    model = args.model_tag or args.model
    if not model:
        build_parser().error("the following arguments are required: model_tag")
    log("INFO", "api_server.py:1839", f"vLLM API server version {VERSION}")
    log("INFO", "utils.py:253", f"non-default args: {redact(args)}")
    if unknown:
        log("WARNING", "vllm_standin", f"stand-in ignores flags it does not model: {unknown}")
    try:
        pcfg = validate_profiler_config({**(args.profiler_config or {}), **dotted}) \
            if (args.profiler_config or dotted) else None
        check_model_dir(model)
        if args.tensor_parallel_size < 1:
            raise ConfigError("tensor_parallel_size\n  Input should be greater than 0")
        if not 0 < args.gpu_memory_utilization <= 1:
            raise ConfigError("Value error, GPU memory utilization must be within (0, 1]. "
                              f"Got {args.gpu_memory_utilization}.")
        spec = validate_speculative_config(args.speculative_config) \
            if args.speculative_config is not None else None
        if args.max_num_seqs is not None and args.max_num_seqs < 1:
            raise ConfigError("max_num_seqs\n  Input should be greater than 0 "
                              f"[type=greater_than, input_value={args.max_num_seqs}]")
    except ConfigError as exc:
        fail_with_traceback("pydantic_core._pydantic_core.ValidationError",
                            f"1 validation error for VllmConfig\n{exc}", "arg_utils.py:1402")
        return 1
    profiler_on = bool(pcfg and pcfg["profiler"])
    n_shards, weights_bytes, max_model_len = model_facts(model, args.max_model_len)
    model_name = (args.served_model_name or [model])[0]
    api_key = args.api_key or os.environ.get("VLLM_API_KEY") or None

    server = ThreadingHTTPServer((args.host, args.port), Handler, bind_and_activate=False)
    try:
        server.server_bind()  # bound early as vLLM does; listen() only when ready
    except OSError as exc:
        fail_with_traceback("OSError", f"[Errno {exc.errno}] {exc.strerror}",
                            "api_server.py:1950")
        return 1

    stop = threading.Event()

    def on_signal(_signum, _frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if profiler_on:
        log("WARNING", "api_router.py:60", f"Profiler with mode '{pcfg['profiler']}' is "
            "enabled in the API server. This should ONLY be used for local development!")
    if profiler_on and pcfg["profiler"] == "torch" and not pcfg["ignore_frontend"]:
        trace_dir = pcfg["torch_profiler_dir"]
        log("INFO", "wrapper.py:764", "Torch profiler enabled. AsyncLLM CPU traces will be "
            f"collected under {trace_dir}")
        log("INFO", "wrapper.py:243", f"Torch profiling enabled. Traces will be saved to: "
            f"{trace_dir}")
    engine = EngineLink({
        "model": model, "served_model_name": [model_name], "tp": args.tensor_parallel_size,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_model_len": max_model_len, "enforce_eager": args.enforce_eager,
        "shards": n_shards, "weights_bytes": weights_bytes,
        "load_s": max(0.0, env_float("VLLM_STANDIN_LOAD_S", 6.0)),
        "profiler": pcfg or {"profiler": None}, "spec": spec,
    })
    while not engine.ready.is_set():
        if stop.is_set():
            engine.terminate()
            return 0
        if engine.dead.is_set():
            code = engine.proc.wait()
            fail_with_traceback("RuntimeError", "Engine core initialization failed. See "
                                "root cause above. Failed core proc(s): "
                                f"{{'EngineCore_DP0': {code}}}", "utils.py:933")
            return 1
        time.sleep(0.05)

    try:  # vLLM builds the app, middlewares included, only once the engine is up
        middlewares = load_middlewares(args.middleware)
    except (ImportError, AttributeError, ValueError) as exc:
        engine.terminate()
        fail_with_traceback(type(exc).__name__, str(exc), "api_server.py:1750")
        return 1
    server.app = {"engine": engine, "model": model, "model_name": model_name, "middlewares": middlewares,
                  "max_model_len": max_model_len, "api_key": api_key,
                  "metrics": Metrics(model_name, speculative=spec is not None),
                  "spec": spec_step_model(spec), "seqs": Seqs(args.max_num_seqs),
                  "routes": routes(profiler_on),
                  "profiling": Profiling(pcfg), "access_log": not args.disable_uvicorn_access_log}
    server.server_activate()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()
    log("INFO", "api_server.py:1971", f"Starting vLLM server on http://{args.host}:{args.port}")
    uvicorn_log(f"Started server process [{os.getpid()}]")
    uvicorn_log("Waiting for application startup.")
    uvicorn_log("Application startup complete.")

    grace = env_float("VLLM_STANDIN_DEAD_GRACE_S", 2.0)
    while not stop.wait(0.1):
        if engine.dead.is_set() and time.monotonic() - engine.dead_at >= grace:
            break  # vLLM's health watchdog: the server shuts itself down
    uvicorn_log("Shutting down")
    server.shutdown()
    server.server_close()
    uvicorn_log("Waiting for application shutdown.")
    engine.terminate()
    uvicorn_log("Application shutdown complete.")
    uvicorn_log(f"Finished server process [{os.getpid()}]")
    return 0


# --------------------------------------------------------------------------
# vllm bench serve: vLLM 0.32's serving benchmark client (the subset the project uses)
# --------------------------------------------------------------------------

BENCH_METRICS = (("ttft", "TTFT", "Time to First Token"),
                 ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                 ("itl", "ITL", "Inter-token Latency"),
                 ("e2el", "E2EL", "End-to-end Latency"))
BENCH_DATASETS = ("sharegpt", "burstgpt", "sonnet", "random", "random-mm", "random-rerank",
                  "hf", "custom", "prefix_repetition", "spec_bench", "timed_trace")


def build_bench_parser():
    parser = argparse.ArgumentParser(prog="vllm bench serve", allow_abbrev=False,
                                     description="Benchmark the online serving throughput "
                                     "(vLLM stand-in: the random dataset, OpenAI completions).")
    parser.add_argument("--label", default=None)
    parser.add_argument("--backend", default="openai", choices=["openai", "vllm"])
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--endpoint", default="/v1/completions")
    parser.add_argument("--model", default=None)
    parser.add_argument("--tokenizer", default=None)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--dataset-name", default="random", choices=BENCH_DATASETS)
    parser.add_argument("--dataset-path", default=None)
    parser.add_argument("--random-input-len", type=int, default=1024)
    parser.add_argument("--random-output-len", type=int, default=128)
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument("--max-concurrency", type=int, default=None)
    parser.add_argument("--request-rate", type=float, default=float("inf"))
    parser.add_argument("--burstiness", type=float, default=1.0)
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--num-warmups", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=None)
    parser.add_argument("--percentile-metrics", default=None)
    parser.add_argument("--metric-percentiles", default="99")
    parser.add_argument("--save-result", action="store_true")
    parser.add_argument("--result-dir", default=None)
    parser.add_argument("--result-filename", default=None)
    parser.add_argument("--metadata", nargs="*")
    parser.add_argument("--disable-tqdm", action="store_true")
    parser.add_argument("--ready-check-timeout-sec", type=int, default=0)
    return parser


def percentile(values, p):
    """numpy.percentile's default (linear interpolation); [] counts as [0] as vLLM's
    ``np.percentile(values or 0, p)`` does."""
    xs = sorted(values) or [0.0]
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(values):
    return sum(values) / len(values) if values else 0.0


def std(values):
    """numpy.std (population, ddof 0)."""
    if not values:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


class BenchOutput:
    """One request's measurements, as vLLM's RequestFuncOutput."""

    def __init__(self, prompt_len):
        self.success, self.error = False, ""
        self.ttft, self.latency, self.itl = 0.0, 0.0, []
        self.prompt_len, self.output_tokens = prompt_len, 0
        self.generated_text = ""
        self.start_time = self.client_queue_time = 0.0


def bench_request(url, payload, prompt_len):
    """POST one streamed completion and time it as vLLM's async_request_openai_completions
    does: TTFT at the first chunk with choices, ITLs between later ones, latency up to the last
    one; usage gives the token counts."""
    import http.client
    import traceback
    import urllib.parse
    out = BenchOutput(prompt_len)
    headers = {"Content-Type": "application/json"}
    api_key = os.environ.get("OPENAI_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    parts = urllib.parse.urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    st = time.perf_counter()
    out.start_time = recent = st
    try:
        conn = conn_cls(parts.hostname, parts.port, timeout=6 * 3600)
        try:
            conn.request("POST", parts.path or "/", body=json.dumps(payload), headers=headers)
            response = conn.getresponse()
            if response.status != 200:
                out.error = response.reason or ""
                response.read()
                return out
            first = False
            while True:
                line = response.readline()
                if not line:
                    break
                line = line.decode().strip()
                if not line or line.startswith(":"):
                    continue
                chunk = line.removeprefix("data: ")
                if chunk == "[DONE]":
                    continue
                data = json.loads(chunk)
                if choices := data.get("choices"):
                    now = time.perf_counter()
                    if not first:
                        first, out.ttft = True, now - st
                    else:
                        out.itl.append(now - recent)
                    recent = now
                    out.generated_text += choices[0].get("text") or ""
                elif usage := data.get("usage"):
                    out.output_tokens = usage.get("completion_tokens")
                    if usage.get("prompt_tokens") is not None:
                        out.prompt_len = usage["prompt_tokens"]
            if first:
                out.success = True
            else:
                out.error = ("Never received a valid chunk to calculate TTFT."
                             "This response will be marked as failed!")
            out.latency = recent - st
        finally:
            conn.close()
    except Exception:
        out.success = False
        out.error = traceback.format_exc()
    return out


def bench_fetch_spec(base_url):
    """The spec_decode counters summed from /metrics, None when the server has none."""
    import urllib.request
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=30) as response:
            text = response.read().decode()
    except OSError:
        return None
    found, totals, per_pos = False, {"drafts": 0, "draft_tokens": 0, "accepted": 0}, {}
    for line in text.splitlines():
        if not line.startswith("vllm:spec_decode"):
            continue
        parts = line.split(None, 1)
        name = parts[0].split("{")[0]
        if not name.endswith("_total"):
            continue
        found = True
        value = int(float(parts[-1]))
        if "num_drafts" in name:
            totals["drafts"] += value
        elif "num_draft_tokens" in name:
            totals["draft_tokens"] += value
        elif "num_accepted_tokens_per_pos" in name:
            match = re.search(r'position="(\d+)"', line)
            if match:
                per_pos[int(match.group(1))] = per_pos.get(int(match.group(1)), 0) + value
        elif "num_accepted_tokens" in name:
            totals["accepted"] += value
    return {**totals, "per_pos": per_pos} if found else None


def bench_first_model(base_url):
    import urllib.request
    headers = {}
    if os.environ.get("OPENAI_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    request = urllib.request.Request(base_url + "/v1/models", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        first = json.load(response)["data"][0]
    return first.get("root") or first["id"], first["id"]


def bench_samples(args):
    """The random dataset: prompts of --random-input-len words (the stand-in's tokens)."""
    rng = random.Random(args.seed)
    return [(" ".join(rng.choice(FAKE_WORDS) for _ in range(max(1, args.random_input_len))),
             max(1, args.random_input_len), args.random_output_len)
            for _ in range(args.num_prompts)]


def bench_run_all(api_url, payloads, max_concurrency, request_rate, burstiness, seed):
    """Send every request on its own thread, at most ``max_concurrency`` at once, arriving as
    vLLM's get_request spaces them (gamma intervals of mean 1/rate; none at rate inf)."""
    sem = threading.Semaphore(max_concurrency) if max_concurrency else None
    outputs = [None] * len(payloads)
    rng = random.Random(seed)

    def one(i, payload, prompt_len, arrival):
        if sem:
            sem.acquire()
        try:
            out = bench_request(api_url, payload, prompt_len)
        finally:
            if sem:
                sem.release()
        out.client_queue_time = out.start_time - arrival
        outputs[i] = out

    threads = []
    for i, (payload, prompt_len) in enumerate(payloads):
        if i and request_rate != float("inf"):
            theta = 1.0 / (request_rate * burstiness)
            time.sleep(rng.gammavariate(burstiness, theta))
        thread = threading.Thread(target=one, args=(i, payload, prompt_len, time.perf_counter()),
                                  daemon=True)
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return outputs


def bench_metrics(outputs, duration):
    """vLLM's calculate_metrics for generation."""
    lens, ttfts, tpots, itls, e2els = [], [], [], [], []
    total_input = completed = 0
    for out in outputs:
        if not out.success:
            lens.append(0)
            continue
        n = out.output_tokens or len(out.generated_text.split())
        lens.append(n)
        total_input += out.prompt_len
        if n > 1:
            tpots.append((out.latency - out.ttft) / (n - 1))
        itls += out.itl
        ttfts.append(out.ttft)
        e2els.append(out.latency)
        completed += 1
    good = [out for out in outputs if out.success]
    max_tps, max_conc = 0.0, 0
    if good:
        t0 = min(out.start_time for out in good)
        seconds = math.ceil(max(out.start_time + out.latency for out in good) - t0) + 1
        tokens, conc = [0] * seconds, [0] * seconds
        for out in good:
            times = [out.start_time + out.ttft]
            for gap in out.itl:
                times.append(times[-1] + gap)
            for stamp in times:
                if 0 <= int(stamp - t0) < seconds:
                    tokens[int(stamp - t0)] += 1
            for sec in range(int(out.start_time - t0), int(out.start_time + out.latency - t0) + 1):
                conc[sec] += 1
        max_tps, max_conc = float(max(tokens)), int(max(conc))
    total_output = sum(lens)
    return {"completed": completed, "failed": len(outputs) - completed,
            "total_input": total_input, "total_output": total_output,
            "request_throughput": completed / duration,
            "output_throughput": total_output / duration,
            "total_token_throughput": (total_input + total_output) / duration,
            "values": {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els},
            "max_output_tokens_per_s": max_tps, "max_concurrent_requests": max_conc}


def bench_print(fmt, label, value):
    print(("{:<40} " + fmt).format(label, value))


def bench_main(argv):
    if argv[:1] != ["serve"]:
        print("usage: vllm bench serve [options]   (vLLM stand-in: only 'bench serve' is "
              "modelled)", file=sys.stderr)
        return 2
    args = build_bench_parser().parse_args(argv[1:])
    if args.dataset_name != "random":
        build_bench_parser().error(f"argument --dataset-name: the stand-in models only "
                                   f"'random', not {args.dataset_name!r}")
    shown = vars(args).copy()
    print("Namespace(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")", flush=True)
    try:
        return bench_serve(args)
    except (ValueError, OSError):
        import traceback
        traceback.print_exc()  # vLLM dies of the exception: its traceback, exit status 1
        return 1


def bench_serve(args):
    if args.max_concurrency is not None and args.max_concurrency <= 0:
        raise ValueError("--max-concurrency must be greater than 0")
    if not args.endpoint.endswith(("completions", "profile")):
        raise ValueError("OpenAI Completions API URL must end with 'completions' or 'profile'.")
    random.seed(args.seed)
    if args.base_url is not None:
        base_url = args.base_url
    else:
        base_url = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}"
    api_url = base_url + args.endpoint
    if args.model is None:
        print("Model not specified, fetching first model from server...")
        model_id, model_name = bench_first_model(base_url)
        print(f"First model name: {model_name}, first model id: {model_id}")
    else:
        model_id, model_name = args.model, args.served_model_name
    tokenizer_id = args.tokenizer if args.tokenizer is not None else model_id
    if not os.path.isdir(tokenizer_id):
        # transformers' AutoTokenizer, offline or for a name that is no repo
        raise OSError(f"Can't load tokenizer for '{tokenizer_id}'. If you were trying to load it "
                      "from 'https://huggingface.co/models', make sure you don't have a local "
                      f"directory with the same name. Otherwise, make sure '{tokenizer_id}' is "
                      "the correct path to a directory containing all relevant files for a "
                      "tokenizer. (stand-in: the tokenizer must be a local directory)")
    metadata = {}
    for item in args.metadata or []:
        if "=" not in item:
            raise ValueError("Invalid metadata format. Please use KEY=VALUE format.")
        key, value = item.split("=", 1)
        metadata[key.strip()] = value.strip()
    ignore_eos = True  # vLLM: the random dataset on an OpenAI backend always ignores EOS
    sampling = {} if args.temperature is None else {"temperature": args.temperature}
    if not sampling:
        print("WARNING: vllm bench serve no longer sets temperature==0 (greedy) in requests by "
              "default. The default will be determined on the server side and can be "
              "model/API specific. For the old behavior, include --temperature=0.")
    metric_names = (args.percentile_metrics or "ttft,tpot,itl").split(",")
    percentiles = [float(p) for p in args.metric_percentiles.split(",")]

    def payload(prompt, output_len):
        body = {"model": model_name or model_id, "prompt": prompt, "repetition_penalty": 1.0,
                "max_tokens": output_len, "logprobs": None, "stream": True,
                "stream_options": {"include_usage": True}}
        if ignore_eos:
            body["ignore_eos"] = True
        return {**body, **sampling}

    samples = bench_samples(args)
    if not samples:
        raise ValueError("--num-prompts must be greater than 0")
    test = (payload(samples[0][0], samples[0][2]), samples[0][1])
    print("Starting initial single prompt test run...")
    if args.ready_check_timeout_sec > 0:
        deadline = time.monotonic() + args.ready_check_timeout_sec
        print(f"Waiting for endpoint to become up in {args.ready_check_timeout_sec} seconds")
        while True:
            probe = bench_request(api_url, *test)
            remaining = deadline - time.monotonic()
            if probe.success or remaining <= 0:
                break
            time.sleep(min(5, remaining))
        if not probe.success:
            raise ValueError("Initial test run failed - Please make sure benchmark arguments "
                             f"are correctly specified. Error: {probe.error}")
        print("Initial test run completed.")
    else:
        print("Skipping endpoint ready check.")
    if args.num_warmups > 0:
        print(f"Warming up with {args.num_warmups} requests...")
        bench_run_all(api_url, [test] * args.num_warmups, args.max_concurrency,
                      float("inf"), 1.0, args.seed)
        print("Warmup run completed.")
    print("Starting main benchmark run...")
    print(f"Traffic request rate: {args.request_rate}")
    distribution = "Poisson process" if args.burstiness == 1.0 else "Gamma distribution"
    print(f"Burstiness factor: {args.burstiness} ({distribution})")
    print(f"Maximum request concurrency: {args.max_concurrency}", flush=True)
    spec_before = bench_fetch_spec(base_url)
    t0 = time.perf_counter()
    outputs = bench_run_all(api_url, [(payload(p, o), n) for p, n, o in samples],
                            args.max_concurrency, args.request_rate, args.burstiness, args.seed)
    duration = time.perf_counter() - t0
    spec_after = bench_fetch_spec(base_url)
    m = bench_metrics(outputs, duration)
    failed = [out for out in outputs if not out.success]
    if failed:
        print("Failed requests during benchmark run detected (capping to 10):")
        for i, out in enumerate(failed[:10]):
            print(f"Error {i}: {out.error}")
    spec = None
    if spec_before is not None and spec_after is not None:
        delta = {key: spec_after[key] - spec_before[key]
                 for key in ("drafts", "draft_tokens", "accepted")}
        if delta["draft_tokens"] > 0:
            positions = sorted(set(spec_before["per_pos"]) | set(spec_after["per_pos"]))
            spec = {**delta, "rate": delta["accepted"] / delta["draft_tokens"] * 100,
                    "length": 1 + delta["accepted"] / delta["drafts"] if delta["drafts"] else 0.0,
                    "per_pos": [(spec_after["per_pos"].get(pos, 0)
                                 - spec_before["per_pos"].get(pos, 0)) / delta["drafts"]
                                for pos in positions] if delta["drafts"] else []}

    print("{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    bench_print("{:<10}", "Successful requests:", m["completed"])
    bench_print("{:<10}", "Failed requests:", m["failed"])
    if args.max_concurrency is not None:
        bench_print("{:<10}", "Maximum request concurrency:", args.max_concurrency)
    if args.request_rate != float("inf"):
        bench_print("{:<10.2f}", "Request rate configured (RPS):", args.request_rate)
    bench_print("{:<10.2f}", "Benchmark duration (s):", duration)
    bench_print("{:<10}", "Total input tokens:", m["total_input"])
    bench_print("{:<10}", "Total generated tokens:", m["total_output"])
    bench_print("{:<10.2f}", "Request throughput (req/s):", m["request_throughput"])
    bench_print("{:<10.2f}", "Output token throughput (tok/s):", m["output_throughput"])
    bench_print("{:<10.2f}", "Peak output token throughput (tok/s):", m["max_output_tokens_per_s"])
    bench_print("{:<10.2f}", "Peak concurrent requests:", m["max_concurrent_requests"])
    bench_print("{:<10.2f}", "Total token throughput (tok/s):", m["total_token_throughput"])

    result = {"date": time.strftime("%Y%m%d-%H%M%S"), "endpoint_type": args.backend,
              "backend": args.backend, "label": args.label, "model_id": model_id,
              "tokenizer_id": tokenizer_id, "num_prompts": args.num_prompts, **metadata,
              "request_rate": args.request_rate if args.request_rate < float("inf") else "inf",
              "burstiness": args.burstiness, "max_concurrency": args.max_concurrency,
              "duration": duration, "completed": m["completed"], "failed": m["failed"],
              "total_input_tokens": m["total_input"], "total_output_tokens": m["total_output"],
              "request_throughput": m["request_throughput"], "request_goodput": None,
              "output_throughput": m["output_throughput"],
              "total_token_throughput": m["total_token_throughput"],
              "latencies": [out.latency for out in outputs],
              "queue_times": [out.client_queue_time for out in outputs],
              "max_output_tokens_per_s": m["max_output_tokens_per_s"],
              "max_concurrent_requests": m["max_concurrent_requests"], "rtfx": 0.0}
    if spec is not None:
        result.update(spec_decode_acceptance_rate=spec["rate"],
                      spec_decode_acceptance_length=spec["length"],
                      spec_decode_num_drafts=spec["drafts"],
                      spec_decode_draft_tokens=spec["draft_tokens"],
                      spec_decode_accepted_tokens=spec["accepted"],
                      spec_decode_per_position_acceptance_rates=spec["per_pos"])
    for name, title, header in BENCH_METRICS:
        if name not in metric_names:
            continue
        values = m["values"][name]
        print("{s:{c}^{n}}".format(s=header, n=50, c="-"))
        result[f"mean_{name}_ms"] = mean(values) * 1000
        result[f"median_{name}_ms"] = percentile(values, 50) * 1000
        result[f"std_{name}_ms"] = std(values) * 1000
        bench_print("{:<10.2f}", f"Mean {title} (ms):", result[f"mean_{name}_ms"])
        bench_print("{:<10.2f}", f"Median {title} (ms):", result[f"median_{name}_ms"])
        for p in percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            result[f"p{word}_{name}_ms"] = percentile(values, p) * 1000
            bench_print("{:<10.2f}", f"P{word} {title} (ms):", result[f"p{word}_{name}_ms"])
    if spec is not None:
        print("{s:{c}^{n}}".format(s="Speculative Decoding", n=50, c="-"))
        bench_print("{:<10.2f}", "Acceptance rate (%):", spec["rate"])
        bench_print("{:<10.2f}", "Acceptance length:", spec["length"])
        bench_print("{:<10}", "Drafts:", spec["drafts"])
        bench_print("{:<10}", "Draft tokens:", spec["draft_tokens"])
        bench_print("{:<10}", "Accepted tokens:", spec["accepted"])
        if spec["per_pos"]:
            print("Per-position acceptance (%):")
            for i, rate in enumerate(spec["per_pos"]):
                bench_print("{:<10.2f}", f"  Position {i}:", rate * 100)
    print("=" * 50, flush=True)

    if args.save_result:
        name = args.result_filename or (
            f"{args.label or args.backend}-{args.request_rate}qps"
            f"{f'-concurrency{args.max_concurrency}' if args.max_concurrency is not None else ''}"
            f"-{model_id.split('/')[-1]}-{result['date']}.json")
        if args.result_dir:
            os.makedirs(args.result_dir, exist_ok=True)
            name = os.path.join(args.result_dir, name)
        with open(name, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
    return 0


def main(argv):
    if len(argv) == 2 and argv[0] in ("--internal-engine", "--internal-worker"):
        chan = Channel(socket.socket(fileno=int(argv[1])))
        role_main = engine_main if argv[0] == "--internal-engine" else worker_main
        return role_main(chan.recv(), chan)
    load_knob_file()
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    if argv[:1] == ["bench"]:
        return bench_main(argv[1:])
    if argv[:1] != ["serve"]:
        print("usage: vllm serve MODEL [options] | vllm bench serve [options]   (vLLM stand-in: "
              "only 'serve' and 'bench serve' are modelled)", file=sys.stderr)
        return 2
    return api_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
