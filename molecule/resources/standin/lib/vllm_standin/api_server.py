"""The API server, the main process of ``vllm serve``: checks the config, binds its port (but
listens only when the engine is ready: connection refused through the whole load), starts
the EngineCore, serves HTTP (handler.py), and shuts down on SIGTERM, or by itself
``VLLM_STANDIN_DEAD_GRACE_S`` after its engine died (503 meanwhile), exiting 0."""

import os
import signal
import threading
import time
from http.server import ThreadingHTTPServer

from vllm_standin import ENGINE_DEAD, VERSION
from vllm_standin.config import (
    ConfigError,
    build_parser,
    model_facts,
    refused_args,
    spec_step_model,
    split_dotted_profiler_args,
    validate_serve_args,
)
from vllm_standin.generation import Seqs
from vllm_standin.handler import Handler, load_middlewares, routes
from vllm_standin.knobs import env_float, fault
from vllm_standin.logs import fail_with_traceback, log, uvicorn_log
from vllm_standin.metrics import Metrics
from vllm_standin.processes import ENTRY, spawn_titled

# An engine that has not said it stepped for this long is not stepping (it says so every 0.05 s).
STEP_STALE_S = 0.5


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
        self.stepped_at = time.monotonic()
        threading.Thread(target=self._read, daemon=True).start()

    def wait_step(self):
        """Return once the engine is stepping (it said so within STEP_STALE_S): a request's next
        token needs an engine step, so a stopped or hung engine holds every request where it is."""
        while time.monotonic() - self.stepped_at > STEP_STALE_S and not self.dead.is_set():
            time.sleep(0.02)

    def _read(self):
        while True:
            try:
                msg = self.chan.recv()
            except (EOFError, OSError, ValueError):
                break
            if msg.get("ev") == "step":
                self.stepped_at = time.monotonic()
            elif msg.get("ev") == "ready":
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
                         f'  File "{ENTRY}", line 1, in output_handler',
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


def redact(args):
    shown = {k: v for k, v in vars(args).items() if v not in (None, False)}
    if "api_key" in shown:
        shown["api_key"] = "<redacted>"
    return shown


def api_main(argv):
    refused = refused_args(argv)
    if refused:  # an argument this release no longer has: argparse's refusal, before anything starts
        build_parser().error(f"unrecognized arguments: {' '.join(refused)}")
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
        pcfg, spec = validate_serve_args(args, model, dotted)
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
        "shards": n_shards, "weights_bytes": weights_bytes, "load_format": args.load_format or "auto",
        "load_s": max(0.0, float(fault("load-slow") or env_float("VLLM_STANDIN_LOAD_S", 6.0))),
        "profiler": pcfg or {"profiler": None}, "spec": spec,
    })
    code = wait_for_engine(engine, stop)
    if code is not None:
        return code

    try:  # vLLM builds the app, middlewares included, only once the engine is up
        middlewares = load_middlewares(args.middleware)
    except (ImportError, AttributeError, ValueError) as exc:
        engine.terminate()
        fail_with_traceback(type(exc).__name__, str(exc), "api_server.py:1750")
        return 1
    server.app = {"engine": engine, "model": model, "model_name": model_name, "middlewares": middlewares,
                  "max_model_len": max_model_len, "api_key": api_key,
                  "metrics": Metrics(model_name, max_model_len, speculative=spec is not None),
                  "spec": spec_step_model(spec), "seqs": Seqs(args.max_num_seqs),
                  "routes": routes(profiler_on),
                  "profiling": Profiling(pcfg), "access_log": not args.disable_uvicorn_access_log}
    return serve(server, engine, stop, f"http://{args.host}:{args.port}")


def wait_for_engine(engine, stop):
    """None once the engine is ready; else the exit status: 0 when stopped during the load,
    1 when the engine died first (vLLM's "Engine core initialization failed")."""
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
    return None


def serve(server, engine, stop, url):
    """Listen and answer until ``stop`` (SIGTERM, SIGINT) or until the engine has been dead
    for VLLM_STANDIN_DEAD_GRACE_S; then shut down as uvicorn does and return 0."""
    server.server_activate()
    log("INFO", "api_server.py:1971", f"Starting vLLM server on {url}")
    uvicorn_log(f"Started server process [{os.getpid()}]")
    uvicorn_log("Waiting for application startup.")
    uvicorn_log("Application startup complete.")
    # uvicorn answers only after its startup lines: a client that got /health 200 finds them in the log
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                     daemon=True).start()

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
