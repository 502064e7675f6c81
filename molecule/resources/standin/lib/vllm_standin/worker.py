"""The worker process, ``VLLM::Worker_TP<r>`` (``VLLM::Worker`` at TP 1), one per rank.

It holds its GPU device file open and writes its memory claim for the nvidia-smi stand-in,
loads the shards (rank 0 prints tqdm's progress), then serves the EngineCore's profiler
commands, writing its rank's trace on a stop. It exits when its EngineCore goes away, as
vLLM's workers watch a death pipe, and on SIGTERM unless ``worker-ignores-sigterm`` names it."""

import contextlib
import os
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
