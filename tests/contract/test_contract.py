"""One probe, two servers: what the stand-in does, vLLM 0.32 does.

Every check below runs unchanged against the stand-in (``[standin]``) and
vLLM's CPU build (``[real]``, marker ``real_vllm``). Each server is started
twice: once without the profiler (HTTP, logs, process tree, then the engine is
killed) and once with it (profiler endpoints and traces, then SIGTERM).
Where the two may differ for a reason outside the contract (a GPU host's trace
names, a CPU's profiler table), the pattern accepts both and says why.
"""

import gzip
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from vllm_ops_host import loads, step_model

from contract_support import (
    FENCE_DIR,
    MAX_MODEL_LEN,
    NOT_ANSWERED,
    SHARDS,
    WAIT_S,
    alive,
    cmdline,
    comm,
    own_address,
    request_from,
    wait_for,
)

# The watch as the role installs it, its module_utils beside it (tests/unit/roles/watch_installed.py; that
# folder has its rule's tests; here it reads the processes of a real server).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "unit" / "roles"))
from watch_installed import watch as vllm_ops_watch

PY_SPY = Path(sys.executable).with_name("py-spy")  # the pinned one (requirements.lock), as the role's
VERSION = "0.32.0"
PROMPT = "the gpu rank"
NOT_FOUND = {"detail": "Not Found"}
# Between the profile prefix and "rank0" comes the rest of vLLM's rank suffix:
# "dp0_pp0_tp0_dcp0_ep0_" on a GPU host (and the stand-in), nothing on the CPU build
# (get_worker_rank_suffix falls back to "rank0" there), so "(.*_)?" takes both.
TRACE = re.compile(r"contract_(.*_)?rank0\.\d+\.pt\.trace\.json\.gz")
TABLE = re.compile(r"contract_(.*_)?rank0\.profiler_out\.txt")
DECODE_STEP = re.compile(r"execute_context_0\(0\)_generation_\d+\(\d+\)")
# The keys of vLLM 0.32's completion answers (values may be null)
COMPLETION_KEYS = {"id", "object", "created", "model", "choices", "usage", "service_tier",
                   "system_fingerprint", "kv_transfer_params", "ec_transfer_params", "metrics"}
CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids",
               "prompt_logprobs", "prompt_token_ids", "routed_experts"}
USAGE_KEYS = {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
              "completion_tokens_details"}
CHUNK_KEYS = {"id", "object", "created", "model", "choices"}
CHUNK_CHOICE_KEYS = {"index", "text", "logprobs", "finish_reason", "stop_reason",
                     "prompt_token_ids", "token_ids"}
ERROR_KEYS = {"message", "type", "param", "code"}
PROGRESS = re.compile(r"^Loading safetensors checkpoint shards: +(\d+)% Completed \| "
                      r"(\d+)/(\d+) \[", re.M)


def lines(output):
    """Output lines, with tqdm's carriage returns taken as line ends too."""
    return re.split(r"[\r\n]", output)


def wait_first_answer(srv):
    """Poll /health from the start: refused while loading, then the first answer.
    Returns (what came before it, the first answer)."""
    before = []

    def answered():
        assert srv.proc.poll() is None, f"exited with {srv.proc.returncode}{srv.tail()}"
        status = srv.health(timeout=10)
        if status is None or status == NOT_ANSWERED:
            before.append(status)
            time.sleep(0.1)
            return None
        return status

    first = wait_for(answered, timeout=WAIT_S, interval=0, what=f"{srv.name} /health")
    return before, first


def assert_ready(srv):
    before, first = wait_first_answer(srv)
    assert first == 200, f"first answer while loading was {first}, not 200{srv.tail()}"
    assert before, "never saw the port refuse a connection during the load"
    assert set(before) == {None}, f"accepted but did not answer during the load: {before}"


def process_tree(srv):
    """(engine pid, [worker pids]) below the API server, as vLLM names them."""
    pids = srv.tree_pids()
    engines = [pid for pid in pids if comm(pid) == "VLLM::EngineCor"]
    assert len(engines) == 1, [(pid, comm(pid)) for pid in pids]
    (engine,) = engines
    assert cmdline(engine) == "VLLM::EngineCore"
    workers = [pid for pid in pids if comm(pid).startswith("VLLM::Worker")]
    return engine, workers


def completion(srv, **fields):
    body = {"model": str(srv.model), "prompt": PROMPT, "max_tokens": 5, "temperature": 0,
            "ignore_eos": True, **fields}
    return srv.post("/v1/completions", json=body)


def assert_in_order(output, texts):
    """Each text occurs in ``output`` after the one before it."""
    position = 0
    for text in texts:
        found = output.find(text, position)
        assert found >= 0, f"{text!r} not found after {texts[:texts.index(text)]}"
        position = found + len(text)


def sse_events(response):
    events = [line[len("data: "):] for line in response.iter_lines(decode_unicode=True)
              if line.startswith("data: ")]
    assert events and events[-1] == "[DONE]", events
    return [json.loads(event) for event in events[:-1]]


def metric(srv, name):
    """A family's value in /metrics, summed over its label sets."""
    text = srv.get("/metrics").text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def assert_the_watch_reads_every_processs_stack(srv, engine):
    """What the watch keeps of a server whose engine is stopped: each process's role, state and Python
    stack (py-spy; the stopped engine's read without attaching), and a verdict naming the engine and
    its frame. The engine and the API server are the server's own; their frames are vLLM's."""
    pids = [srv.proc.pid, *srv.tree_pids()]
    evidence = {pid: vllm_ops_watch.process_evidence(pid, srv.proc.pid, str(PY_SPY)) for pid in pids}
    roles = {pid: (e["role"], e["rank"]) for pid, e in evidence.items() if e["role"] != "other"}
    workers = [pid for pid, role in roles.items() if role[0] == "worker"]
    assert workers and roles == {srv.proc.pid: ("API server", None), engine: ("engine", None),
                                 **{w: ("worker", 0) for w in workers}}
    for pid in roles:
        entry = evidence[pid]
        assert entry["py_spy"] and any(t["frames"] for t in entry["py_spy"]), (entry["name"], entry["py_spy_error"])
        assert "TracerPid:\t0" in Path(f"/proc/{pid}/status").read_text(), entry["name"]  # none left traced
    assert evidence[engine]["state"].startswith("T")
    verdict = vllm_ops_watch.verdict(list(evidence.values()))
    assert verdict.startswith(f"the engine (VLLM::EngineCore, pid {engine}) is stopped (State T (stopped), "
                              "wait channel do_signal_stop) in "), verdict
    print(f"{srv.name}: {verdict}")  # the docs' example (docs/watch.md), from a real server


def assert_a_stopped_engine_holds_requests_while_health_answers(srv, engine, senders=8):
    """SIGSTOP the engine while senders keep it busy: /health stays 200, /metrics shows requests held
    and the step counter frozen, nothing completes; SIGCONT, and every held request finishes.

    Each sender sends its next request as soon as one returns, so the engine always has work when it
    is stopped, however fast this machine decodes (a fixed batch could finish before the stop).
    """
    steps = "vllm:iteration_tokens_total_count"
    before = metric(srv, steps)
    scraped, started = vllm_ops_watch.parse_metrics(srv.get("/metrics").text), time.monotonic()
    codes, done = [], threading.Event()

    def send():
        while not done.is_set():
            codes.append(completion(srv, max_tokens=MAX_MODEL_LEN // 4).status_code)

    def in_flight():
        return metric(srv, "vllm:num_requests_running") + metric(srv, "vllm:num_requests_waiting")

    threads = [threading.Thread(target=send, daemon=True) for _ in range(senders)]
    for t in threads:
        t.start()
    # The stop must catch the engine holding requests: its last stats before the stop are what /metrics
    # keeps, and on a fast machine they can fall between one batch's end and the next's start (a CI run
    # here: none held). Such a stop is let go and made again, at most three times.
    for attempt in range(3):
        wait_for(lambda floor=before + 5: in_flight() > 0 and metric(srv, steps) > floor,
                 timeout=WAIT_S, interval=0, what=f"{srv.name}'s requests stepping")
        os.kill(engine, signal.SIGSTOP)
        time.sleep(1.0)  # the last stats the engine sent before it stopped reach /metrics
        if in_flight() > 0 or attempt == 2:
            break
        os.kill(engine, signal.SIGCONT)
        before = metric(srv, steps)
    done.set()  # no sender starts another: what the engine holds finishes after SIGCONT
    try:
        time.sleep(0.5)  # a sender's request sent as the engine stopped is held, not answered
        frozen, held, answered = metric(srv, steps), in_flight(), len(codes)
        assert held > 0, f"the engine held no request when it stopped, three times{srv.tail()}"
        assert_the_watch_reads_every_processs_stack(srv, engine)
        time.sleep(2.0)
        assert srv.get("/health").status_code == 200
        assert (metric(srv, steps), in_flight(), len(codes)) == (frozen, held, answered)
    finally:
        os.kill(engine, signal.SIGCONT)
    for t in threads:
        t.join(timeout=WAIT_S)
    assert not any(t.is_alive() for t in threads)
    assert set(codes) == {200} and len(codes) >= answered + held
    wait_for(lambda: in_flight() == 0, timeout=WAIT_S, what=f"{srv.name}'s gauges back to idle")
    assert metric(srv, steps) > frozen
    assert_the_step_model_reads_the_servers_metrics(srv, scraped, started, senders)


def assert_the_step_model_reads_the_servers_metrics(srv, before, started, senders):
    """The watch's step model (plugins/module_utils/step_model.py) over this server's own /metrics across
    the busy stretch: every metric it needs is exported under the name it reads, and the interval's
    figures hold together (a step generates at least one and at most ``senders`` tokens, and schedules at
    least the tokens it generates)."""
    after = vllm_ops_watch.parse_metrics(srv.get("/metrics").text)
    assert step_model.missing(after) == [], step_model.missing(after)
    measured = step_model.interval(before, after, time.monotonic() - started)
    assert measured is not None and measured["step_source"] == "vllm:inter_token_latency_seconds", measured
    assert 1.0 <= measured["batch"] <= senders and measured["tokens_per_step"] >= measured["batch"], measured
    assert measured["step_ms"] > 0 and 0.0 <= measured["kv"] <= 1.0, measured


# ---------------------------------------------------------------- without the profiler

def test_loads_serves_and_exits_0_when_its_engine_is_killed(server):
    srv = server.start()
    assert_ready(srv)

    # HTTP, as the roles and the campaign use it
    ready = srv.get("/health")
    assert (ready.status_code, ready.content) == (200, b"")
    assert srv.get("/version").json() == {"version": VERSION}
    models = srv.get("/v1/models").json()
    assert models["object"] == "list"
    (entry,) = models["data"]
    assert (entry["id"], entry["object"], entry["owned_by"], entry["root"],
            entry["max_model_len"]) == (str(srv.model), "model", "vllm", str(srv.model),
                                        MAX_MODEL_LEN)

    answer = completion(srv)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == COMPLETION_KEYS
    assert (body["object"], body["model"]) == ("text_completion", str(srv.model))
    (choice,) = body["choices"]
    assert set(choice) == CHOICE_KEYS
    assert isinstance(choice["text"], str) and choice["finish_reason"] == "length"
    usage = body["usage"]
    assert set(usage) == USAGE_KEYS
    assert usage["completion_tokens"] == 5 and usage["prompt_tokens"] >= 1
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5

    # streamed, as the campaign sends its requests
    streamed = completion(srv, max_tokens=3, stream=True,
                          stream_options={"include_usage": True})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    chunks = sse_events(streamed)
    tokens = [c for c in chunks if c["choices"]]
    assert len(tokens) == 3, chunks  # one chunk per token
    assert all(set(c) == CHUNK_KEYS and set(c["choices"][0]) == CHUNK_CHOICE_KEYS
               for c in tokens), tokens
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None, None, "length"]
    last = chunks[-1]
    assert set(last) == CHUNK_KEYS | {"usage", "system_fingerprint"}, last
    assert (last["choices"], set(last["usage"]), last["usage"]["completion_tokens"]) == (
        [], {"prompt_tokens", "completion_tokens", "total_tokens"}, 3)

    # Prometheus metrics after those two requests (8 tokens); labels sorted by name
    metrics = srv.get("/metrics").text
    labels = f'engine="0",model_name="{srv.model}"'
    for line in (f"vllm:generation_tokens_total{{{labels}}} 8.0",
                 f'vllm:request_success_total{{engine="0",finished_reason="length",'
                 f'model_name="{srv.model}"}} 2.0',
                 f'vllm:request_success_total{{engine="0",finished_reason="stop",'
                 f'model_name="{srv.model}"}} 0.0',
                 f"vllm:num_requests_running{{{labels}}} 0.0",
                 f"vllm:time_to_first_token_seconds_count{{{labels}}} 2.0",
                 f"vllm:inter_token_latency_seconds_count{{{labels}}} 6.0",
                 f"vllm:request_time_per_output_token_seconds_count{{{labels}}} 2.0",
                 f"vllm:e2e_request_latency_seconds_count{{{labels}}} 2.0",
                 f'vllm:e2e_request_latency_seconds_bucket{{engine="0",le="+Inf",'
                 f'model_name="{srv.model}"}} 2.0'):
        assert line in metrics.splitlines(), line
    for family in ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                   "vllm:prompt_tokens_total", "vllm:time_to_first_token_seconds_created"):
        assert re.search(rf"^{family}{{{re.escape(labels)}}} [\d.e+-]+$", metrics, re.M), family

    unknown = completion(srv, model="no-such-model")
    assert unknown.status_code == 404
    error = unknown.json()["error"]
    assert (set(error), error["type"], error["code"], error["param"]) == (
        ERROR_KEYS, "NotFoundError", 404, "model")
    assert error["message"].startswith(
        "The model `no-such-model` does not exist. Valid aliases: "), error
    too_long = completion(srv, max_tokens=5000)
    assert (too_long.status_code, too_long.json()) == (400, {"error": {
        "message": f"max_tokens=5000 cannot be greater than max_model_len={MAX_MODEL_LEN}. "
                   "Please request fewer output tokens. (parameter=max_tokens, value=5000)",
        "type": "BadRequestError", "param": "max_tokens", "code": 400}})

    missing = srv.get("/no-such-path")
    assert (missing.status_code, missing.json()) == (404, NOT_FOUND)
    for path in ("/start_profile", "/stop_profile"):  # only with --profiler-config
        answer = srv.post(path)
        assert (answer.status_code, answer.json()) == (404, NOT_FOUND), path

    # logs: tqdm's shard progress (raw stderr, no process prefix), then readiness
    output = srv.log()
    progress = PROGRESS.findall("\n".join(lines(output)))
    assert progress, f"no shard progress line{srv.tail()}"
    assert progress[0][1:] == ("0", str(SHARDS)) and progress[-1] == (
        "100", str(SHARDS), str(SHARDS)), progress
    assert_in_order(output, [f"{SHARDS}/{SHARDS} [",
                             "init engine (profile, create kv cache, warmup model) took",
                             f"Starting vLLM server on http://127.0.0.1:{srv.port}",
                             "INFO:     Application startup complete."])
    assert re.search(r"^\(EngineCore\S* pid=\d+\) INFO .* init engine \(profile, create kv "
                     r"cache, warmup model\) took [\d.]+ s$", output, re.M)
    assert re.search(r"^INFO:     Started server process \[\d+\]$", output, re.M)
    assert re.search(r'^INFO:     127\.0\.0\.1:\d+ - "GET /version HTTP/1\.1" 200 OK$',
                     output, re.M), "uvicorn's access log line, unprefixed"
    # the load's milestones, as the health wait splits a load into phases (vllm_ops_host.loads): the real
    # CPU build logs these six (no "Model loading took", no CUDA graphs); the stand-in logs them too
    found = loads.parse_load(lines(output))["milestones_found"]
    assert {"load_start", "weights", "compile", "kv", "engine", "ready"} <= set(found), found

    # the process tree: API server -> VLLM::EngineCore -> VLLM::Worker (TP 1)
    engine, workers = process_tree(srv)
    assert [comm(pid) for pid in workers] == ["VLLM::Worker"]
    assert cmdline(workers[0]) == "VLLM::Worker"
    tree = [srv.proc.pid, *srv.tree_pids()]

    # SIGSTOP the engine with requests in flight (a hung engine, as the watch must find it): /health
    # still 200, /metrics answers with the requests running and the step counter frozen; SIGCONT,
    # and every request finishes
    assert_a_stopped_engine_holds_requests_while_health_answers(srv, engine)

    # SIGKILL the engine: 503 (never 200 again), then the server exits 0 on its own
    assert srv.get("/health").status_code == 200
    os.kill(engine, signal.SIGKILL)
    statuses = []

    def exited():
        statuses.append(srv.health(timeout=5))
        time.sleep(0.05)
        return srv.proc.poll() is not None

    wait_for(exited, timeout=WAIT_S, interval=0, what=f"{srv.name} to exit after its engine")
    assert srv.proc.returncode == 0, f"exit status {srv.proc.returncode}{srv.tail()}"
    assert 503 in statuses, statuses
    after = statuses[next(i for i, s in enumerate(statuses) if s != 200):]
    assert set(after) <= {503, None}, f"healthy again after the engine died: {statuses}"
    wait_for(lambda: not any(alive(pid) for pid in tree), timeout=WAIT_S,
             what=f"{srv.name}'s processes {tree} to be gone")
    output = srv.log()
    assert "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup" in output
    assert re.search(r"EngineDeadError: EngineCore encountered an issue\.", output)
    assert "INFO:     Application shutdown complete." in output


# ---------------------------------------------------------------- with the profiler

def test_profiler_endpoints_traces_and_sigterm(server, tmp_path):
    traces = tmp_path / "traces"
    srv = server.start("--profiler-config", json.dumps({
        "profiler": "torch", "torch_profiler_dir": str(traces),
        "torch_profiler_with_stack": False, "ignore_frontend": True}))
    assert_ready(srv)
    _, (worker,) = process_tree(srv)

    idle_stop = srv.post("/stop_profile", timeout=WAIT_S)
    assert (idle_stop.status_code, idle_stop.content) == (200, b""), idle_stop.text
    started = srv.post("/start_profile", json={"profile_prefix": "contract"})
    assert (started.status_code, started.content) == (200, b""), started.text
    again = srv.post("/start_profile")
    assert again.status_code == 409, again.text
    assert again.json() == {"error": {
        "message": "A profiling session is already active. Call /stop_profile before "
                   "starting another session.",
        "type": "Conflict", "param": None, "code": 409}}
    assert completion(srv).status_code == 200
    stopped = srv.post("/stop_profile", timeout=WAIT_S)
    assert (stopped.status_code, stopped.content) == (200, b""), stopped.text
    stopped_again = srv.post("/stop_profile", timeout=WAIT_S)
    assert stopped_again.status_code == 200, stopped_again.text

    # what the ranks wrote: one trace and one table (ignore_frontend: no API server trace)
    names = sorted(path.name for path in traces.iterdir())
    assert len(names) == 2, names
    assert [n for n in names if TRACE.fullmatch(n)] and [n for n in names if TABLE.fullmatch(n)], \
        names
    (trace_name,) = [n for n in names if TRACE.fullmatch(n)]
    with gzip.open(traces / trace_name, "rt") as fh:
        trace = json.load(fh)
    assert (trace["distributedInfo"]["rank"], trace["distributedInfo"]["world_size"]) == (0, 1)
    assert trace["vllm_version"] == VERSION
    steps = [event for event in trace["traceEvents"] if event.get("cat") == "user_annotation"
             and DECODE_STEP.fullmatch(event.get("name", ""))]
    assert steps, "no decode-step annotation in the trace"
    assert {event["pid"] for event in steps} == {worker}
    assert (traces / next(n for n in names if TABLE.fullmatch(n))).read_text().strip()

    output = srv.log()
    assert_in_order(output, ["Stopping profiler...",  # the idle stop: 200, and a warning
                             "Profiler was not started, nothing to stop.", "Profiler stopped.",
                             "Starting profiler...", "Profiler started.",
                             "Starting profiler...",  # the 409 is logged as a start too
                             "Stopping profiler...", "Profiler stopped successfully.",
                             "Profiler stopped."])
    assert f"Torch profiling enabled. Traces will be saved to: {traces}" in output
    # rank 0 prints the table to stdout as print() does: no process prefix
    assert re.search(r"^Self (CPU|CUDA) time total: [\d.]+m?s$", output, re.M), srv.tail()

    # SIGTERM (systemctl stop): the whole tree goes, exit status 0
    tree = [srv.proc.pid, *srv.tree_pids()]
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait_exit(timeout=WAIT_S) == 0, srv.tail()
    wait_for(lambda: not any(alive(pid) for pid in tree), timeout=WAIT_S,
             what=f"{srv.name}'s processes {tree} to be gone")
    assert "INFO:     Application shutdown complete." in srv.log()


def test_the_loopback_fence_runs_before_everything_else(server, tmp_path):
    # --middleware with the project's fence and the traffic recorder, as the armed unit runs them: the
    # profiler answers 403 to a client that is not on loopback, before the API key is even read; the rest
    # passes, and the completions are recorded with the lengths the server gave them.
    secret = "sk-contract-fence"
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "vllm_ops_traffic.py").symlink_to(Path(__file__).resolve().parents[2] / "plugins/module_utils/traffic.py")
    recordings = tmp_path / "traffic"
    server.env = {**server.env, "PYTHONPATH": f"{FENCE_DIR}:{lib}", "VLLM_API_KEY": secret,
                  "VLLM_OPS_TRAFFIC_DIR": str(recordings), "VLLM_OPS_TRAFFIC_BLOCK": "2"}
    srv = server.start("--host", "0.0.0.0", "--middleware", "vllm_ops_fence.LoopbackFence",
                       "--middleware", "vllm_ops_traffic.TrafficRecorder",
                       "--profiler-config", json.dumps({
                           "profiler": "torch", "torch_profiler_dir": str(tmp_path / "traces"),
                           "torch_profiler_with_stack": False, "ignore_frontend": True}))
    assert_ready(srv)
    outside = own_address()
    auth = {"Authorization": f"Bearer {secret}"}
    for path in ("/start_profile", "/stop_profile"):
        for headers in (auth, {}):
            status, body = request_from(outside, srv.port, "POST", path, headers=headers)
            assert status == 403, (path, body, srv.tail())
            assert set(json.loads(body)["error"]) == ERROR_KEYS
    assert request_from(outside, srv.port, "GET", "/v1/models")[0] == 401
    assert request_from(outside, srv.port, "GET", "/health")[0] == 200
    status, body = request_from(outside, srv.port, "POST", "/v1/completions", headers=auth, body={
        "model": str(srv.model), "prompt": PROMPT, "max_tokens": 3, "stream": True})
    assert status == 200 and body.decode().rstrip().endswith("data: [DONE]"), body
    whole = srv.post("/v1/completions", headers=auth, json={"model": str(srv.model), "prompt": PROMPT,
                                                            "max_tokens": 5, "ignore_eos": True}).json()
    tokens = srv.post("/tokenize", json={"model": str(srv.model), "prompt": PROMPT}).json()["tokens"]

    def lines():
        return [json.loads(line) for path in sorted(recordings.glob("traffic-*.jsonl"))
                for line in path.read_text().splitlines()]

    wait_for(lambda: len(lines()) == 2, timeout=WAIT_S, what="both completions recorded")
    streamed, answered = sorted(lines(), key=lambda line: line["stream"], reverse=True)
    assert answered["input_length"] == whole["usage"]["prompt_tokens"] == len(tokens)
    assert answered["output_length"] == whole["usage"]["completion_tokens"] == 5
    assert streamed["input_length"] == len(tokens) and 1 <= streamed["output_length"] <= 3
    assert streamed["hash_ids"] == answered["hash_ids"] and len(answered["hash_ids"]) == -(-len(tokens) // 2)
    sidecar = json.loads(next(recordings.glob("traffic-*.json")).read_text())
    assert sidecar["vllm_version"] == VERSION and sidecar["errors"] == 0 and sidecar["prefix"] == "tokens"
    assert not [word for word in PROMPT.split() if word in "".join(p.read_text() for p in recordings.iterdir())]
    assert srv.post("/start_profile", headers=auth).status_code == 200
    assert srv.post("/stop_profile", headers=auth, timeout=WAIT_S).status_code == 200
    assert re.search(rf'{re.escape(outside)}:\d+ - "POST /start_profile HTTP/1.1" 403', srv.log()), srv.tail()
