"""The EngineCore process, ``VLLM::EngineCore``.

It starts one worker per rank, waits for their load (dying part-way when
``engine-dies-during-load`` is set), loads a draft model when speculating with one, tells the
API server it is ready, then steps: it tells the API server every :data:`STEP_S` that it stepped
(the API server's requests advance only while it does, so a stopped or hung engine stops them,
as vLLM's does) and forwards the profiler commands to the workers. ``engine-hangs`` makes it stop
stepping for good, alive, in a wait for its workers' broadcast (``collective_rpc`` ->
``acquire_read``, where a real hung step waits); ``once`` fires one start. It exits 1 when a
worker dies or ``engine-dies`` is set; on SIGTERM it stops its workers as vLLM's executor does
(SIGTERM, wait, SIGKILL) and exits 0. It ignores the loss of its API server."""

import os
import select
import signal
import sys
import time

from vllm_standin import VERSION
from vllm_standin.config import SPEC_DRAFT_DIR_METHODS
from vllm_standin.knobs import consume_if_once, count_down, env_float, fault
from vllm_standin.logs import fail_with_traceback, log, set_label
from vllm_standin.processes import set_comm, spawn_titled, worker_name

# How often the engine tells the API server it stepped (the API server's requests wait for it).
STEP_S = 0.05


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
        let_by = False  # this load went by a switch's "after N" (counted once a load)

        def maybe_die_loading():
            nonlocal let_by
            # Part-way through the shard progress, as a real load failure would.
            if let_by or time.monotonic() - t0 < 0.4 * cfg["load_s"] * 0.85 \
                    or fault("engine-dies-during-load") is None:
                return
            if count_down("engine-dies-during-load"):
                let_by = True
                return
            consume_if_once("engine-dies-during-load")
            self.die("gpu_model_runner.py:2890",
                     "CUDA error: an illegal memory access was encountered "
                     "(stand-in fault engine-dies-during-load)", during_load=True)

        self.gather("loaded", on_wait=maybe_die_loading)
        self.load_draft_model()
        # The workers measured their KV cache memory; the engine sizes the cache, the workers capture
        # their CUDA graphs, then the warm-up (worker.SHARES: 1 % and 2 % of the load).
        mib = int(cfg["gpu_memory_utilization"] * env_float("GPU_SIM_TOTAL_MIB", 143771))
        time.sleep(cfg["load_s"] * 0.01)
        log("INFO", "kv_cache_utils.py:2327", f"GPU KV cache size: {mib * 12:,} tokens, Maximum concurrency for "
            f"{cfg['max_model_len']:,} tokens per request: {mib * 12 / max(cfg['max_model_len'], 1):.2f}x")
        self.forward({"id": "capture_graphs", "cmd": "capture_graphs"}, reply=False)
        time.sleep(cfg["load_s"] * 0.02)
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
            ready, _, _ = select.select(socks, [], [], STEP_S)
            if fault("engine-hangs") is not None:
                consume_if_once("engine-hangs")
                self.execute_model()
            if api_alive:
                self.api.send({"ev": "step"})
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

    def execute_model(self):
        """engine-hangs: the step's broadcast to the workers is never answered (a hung collective on
        one rank); only SIGTERM (EngineShutdown) or SIGKILL ends it."""
        self.collective_rpc("execute_model")

    def collective_rpc(self, method):
        log("WARNING", "shm_broadcast.py:466", "No available shared memory broadcast block found in "
            "60 seconds. This typically happens when some processes are hanging or doing some "
            f"time-consuming work (e.g. compilation, weight/kv cache quantization). ({method}; "
            "stand-in fault engine-hangs)")
        self.acquire_read()

    @staticmethod
    def acquire_read():
        while True:
            time.sleep(0.5)

    def forward(self, msg, reply=True):
        for _, chan in self.workers:
            chan.send(msg)
        self.gather(msg["id"])
        if reply:
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
    set_label("EngineCore_DP0")
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
