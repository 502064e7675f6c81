"""The worker process, ``VLLM::Worker_TP<r>`` (``VLLM::Worker`` at TP 1), one per rank.

It holds its GPU device file open and writes its memory claim for the nvidia-smi stand-in,
loads the shards (rank 0 prints tqdm's progress and vLLM 0.32's load lines), processes the
weights, compiles (or reads its compile cache back), measures its KV cache memory, captures
its CUDA graphs when the EngineCore asks, then serves the EngineCore's profiler commands,
writing its rank's trace on a stop. It exits when its EngineCore goes away, as vLLM's
workers watch a death pipe, and on SIGTERM unless ``worker-ignores-sigterm`` names it.

The load's phases and their shares of ``VLLM_STANDIN_LOAD_S`` (:data:`SHARES`): the shards
85 % (times the load format's factor, ``VLLM_STANDIN_LOAD_FORMAT_FACTORS``), then the rest
of the engine's start 15 %: post-load 2 %, compile 6 % (1 % read back from the compile cache,
none with ``--enforce-eager``), profiling run 1 %, KV cache 1 % (EngineCore), CUDA graphs 3 %
(none with ``--enforce-eager``), the engine's warm-up 2 % (EngineCore)."""

import contextlib
import hashlib
import os
import re
import select
import signal
import socket
import sys
import time

from vllm_standin import VERSION
from vllm_standin.knobs import env_float, fault, fault_names_rank
from vllm_standin.logs import OUT_LOCK, fail_with_traceback, log, set_label
from vllm_standin.nccl import step_allreduce_ms
from vllm_standin.processes import set_comm, worker_name
from vllm_standin.traces import (
    cuda_time_table,
    load_json_gz,
    min_ts,
    model_trace,
    retime_template,
    synthetic_trace,
    template_files,
    write_profiler_table,
    write_trace_file,
)

SLOW_FLUSH_S = 30.0  # stop-profile-slow's flush when its file is empty
SHARES = {"shards": 0.85, "post_load": 0.02, "compile": 0.06, "compile_cached": 0.01, "profile_run": 0.01,
          "kv_cache": 0.01, "cuda_graphs": 0.03, "engine_rest": 0.02}
COMPILE_RANGE = "(1, 8192)"
RUNAI_BAR = "Loading safetensors using Runai Model Streamer"  # weight_utils.py's bar of that loader
DEFAULT_BAR = "Loading safetensors checkpoint shards"


def load_format_factor(load_format):
    """The shard time's factor for ``--load-format``: ``VLLM_STANDIN_LOAD_FORMAT_FACTORS`` entries
    ``FORMAT:FACTOR`` (spaces or commas between them, e.g. ``fastsafetensors:0.5``); 1 otherwise."""
    for entry in re.split(r"[\s,]+", os.environ.get("VLLM_STANDIN_LOAD_FORMAT_FACTORS", "")):
        name, sep, value = entry.partition(":")
        if sep and name == (load_format or "auto"):
            try:
                return max(0.0, float(value))
            except ValueError:
                return 1.0
    return 1.0


def compile_cache(cfg):
    """``(directory or None, key path or None)`` of vLLM's torch.compile cache: ``$VLLM_CACHE_ROOT``
    (else ``~/.cache/vllm``) ``/torch_compile_cache/<hash of the model's config>``; None when
    ``VLLM_DISABLE_COMPILE_CACHE=1`` turns it off."""
    if os.environ.get("VLLM_DISABLE_COMPILE_CACHE", "0") not in ("", "0"):
        return None, None
    root = os.environ.get("VLLM_CACHE_ROOT") or os.path.join(os.path.expanduser("~"), ".cache", "vllm")
    key = hashlib.sha256(json_key(cfg).encode()).hexdigest()[:10]
    directory = os.path.join(root, "torch_compile_cache", key, f"rank_{cfg['rank']}_0", "backbone")
    return directory, os.path.join(directory, "vllm_compile_cache.py")


def json_key(cfg):
    return f"{cfg['model']}|tp={cfg['tp']}|max_len={cfg['max_model_len']}"


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
        """Simulate loading the shards (rank 0 prints tqdm-style progress and vLLM's lines), the
        weights' processing, the compile and the profiling run. Returns False when the engine
        went away during the load."""
        cfg = self.cfg
        total = cfg["shards"]
        load_s = cfg["load_s"] * SHARES["shards"] * load_format_factor(cfg.get("load_format"))
        per_shard = load_s / total
        if self.rank == 0:
            log("INFO", "gpu_model_runner.py:5040", f"Starting to load model {cfg['model']}...")
            log("INFO", "base_loader.py:82", "Initializing model took 0.124266 seconds")
            log("INFO", "weight_utils.py:1108", f"Filesystem type for checkpoints: EXT4. Checkpoint size: "
                f"{cfg['weights_bytes'] / 2**30:.2f} GiB. Available RAM: {available_ram_gib():.2f} GiB.")
        t0 = time.monotonic()
        bar = RUNAI_BAR if cfg.get("load_format") == "runai_streamer" else DEFAULT_BAR
        if self.rank == 0:
            self.progress(0, total, 0.0, bar)
        for n in range(1, total + 1):
            if not self.engine_alive(max(0.0, t0 + n * per_shard - time.monotonic())):
                return False
            if self.rank == 0:
                self.progress(n, total, time.monotonic() - t0, bar)
        took = time.monotonic() - t0
        if self.rank == 0:
            log("INFO", "default_loader.py:501", f"Loading weights took {took:.2f} seconds")
        if not self.engine_alive(cfg["load_s"] * SHARES["post_load"]):
            return False
        if self.rank == 0:
            gib = cfg["weights_bytes"] / cfg["tp"] / 2**30 or 72.37
            log("INFO", "gpu_model_runner.py:5150",
                f"Model loading took {gib:.4f} GiB memory and {time.monotonic() - t0 + 0.124266:.6f} seconds")
        return self.compile_and_profile()

    def compile_and_profile(self):
        """torch.compile (or its cache read back) unless --enforce-eager, then the profiling run and the
        KV cache memory, as vLLM's worker logs them; False when the engine went away."""
        cfg, rank0 = self.cfg, self.rank == 0
        if not cfg["enforce_eager"]:
            directory, key = compile_cache(cfg)
            cached = key is not None and os.path.isfile(key)
            if rank0:
                if directory is None:
                    log("INFO", "backends.py:1102", "[backbone] vLLM's torch.compile cache is disabled.")
                else:
                    log("INFO", "backends.py:1104", f"[backbone] Using cache directory: {directory} for vLLM's "
                        "torch.compile")
            t = time.monotonic()
            share = SHARES["compile_cached"] if cached else SHARES["compile"]
            if not self.engine_alive(cfg["load_s"] * share):
                return False
            took = time.monotonic() - t
            if rank0:
                log("INFO", "backends.py:1166", f"[backbone] Dynamo bytecode transform time: {took * 0.3:.2f} s")
                if cached:
                    log("INFO", "backends.py:295", "[backbone] Directly load the compiled graph(s) for compile "
                        f"range {COMPILE_RANGE} from the cache, took {took * 0.7:.3f} s")
                else:
                    log("INFO", "backends.py:399", f"[backbone] Compiling a graph for compile range {COMPILE_RANGE} "
                        f"takes {took * 0.7:.2f} s")
                log("INFO", "monitor.py:62", f"[backbone] torch.compile took {took:.2f} s in total")
            if key and not cached:
                self.save_compile_cache(directory, key)
        t = time.monotonic()
        if not self.engine_alive(cfg["load_s"] * SHARES["profile_run"]):
            return False
        if rank0:
            log("INFO", "monitor.py:91", f"[backbone] Initial profiling/warmup run took {time.monotonic() - t:.2f} s")
            mib = int(cfg["gpu_memory_utilization"] * env_float("GPU_SIM_TOTAL_MIB", 143771))
            log("INFO", "gpu_worker.py:760", f"Available KV cache memory: {mib / 1024 * 0.4:.2f} GiB")
        return True

    @staticmethod
    def save_compile_cache(directory, key):
        try:
            os.makedirs(directory, exist_ok=True)
            with open(key, "w", encoding="utf-8") as fh:
                fh.write("# vllm-standin compile cache\n")
        except OSError as exc:
            log("WARNING", "backends.py:1110", f"[backbone] unable to save the compile cache to {directory}: {exc}")

    def capture_graphs(self):
        """CUDA graph capture, at the EngineCore's word after it sized the KV cache (not with --enforce-eager)."""
        if self.cfg["enforce_eager"]:
            return
        t = time.monotonic()
        time.sleep(self.cfg["load_s"] * SHARES["cuda_graphs"])
        if self.rank == 0:
            log("INFO", "gpu_model_runner.py:6582",
                f"Graph capturing finished in {time.monotonic() - t:.0f} secs, took 0.52 GiB")

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
    def progress(n, total, elapsed, bar=DEFAULT_BAR):
        rate = n / elapsed if elapsed > 0 and n else 0.0
        remaining = fmt_interval((total - n) / rate) if rate else "?"
        if not rate:
            rate_fmt = "?it/s"
        elif rate < 1:
            rate_fmt = f"{1 / rate:5.2f}s/it"
        else:
            rate_fmt = f"{rate:5.2f}it/s"
        line = (f"{bar}: {100 * n / total:3.0f}% Completed "
                f"| {n}/{total} [{fmt_interval(elapsed)}<{remaining}, {rate_fmt}]")
        # tqdm writes "\r" + bar_format, and vLLM's bar_format ends in "\n";
        # closing the bar adds one more "\n".
        with OUT_LOCK:
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
            elif msg["cmd"] == "capture_graphs":
                self.capture_graphs()
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
        # The flush: a real rank exports its ~80 MB trace here, for minutes, and the engine (which
        # waits for every rank) steps no more meanwhile. stop-profile-slow holds it that long.
        slow = fault("stop-profile-slow")
        time.sleep(float(slow or SLOW_FLUSH_S) if slow is not None else env_float("VLLM_STANDIN_FLUSH_S", 0.5))
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
        if step_allreduce_ms() > 0:  # the all-reduce knob: the traces show the model's own steps
            trace = model_trace(self.rank, world, start_ns, f"VLLM::{worker_name(self.rank, world)}",
                                env_float("VLLM_STANDIN_TPOT_MS", 5.0), step_allreduce_ms())
        elif not files:
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


def available_ram_gib():
    """MemAvailable of /proc/meminfo, GiB (0 when unreadable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def fmt_interval(seconds):
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def worker_main(cfg, chan):
    label = worker_name(cfg["rank"], cfg["tp"])
    set_label(label)
    set_comm(f"VLLM::{label}")
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
