"""The vLLM stand-in behaves as vLLM 0.32 does, as a user sees it."""

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import requests

from standin_support import (
    FENCE_DIR,
    ROOT,
    VLLM,
    WAIT_S,
    alive,
    cmdline,
    comm,
    fd_targets,
    own_address,
    request_from,
    wait_for,
)

CLAIM_MIB = int(0.95 * 143771)
PROGRESS = re.compile(
    r"Loading safetensors checkpoint shards: (?P<pct>[ \d]{3})% Completed \| "
    r"(?P<n>\d+)/(?P<total>\d+) \[\d\d:\d\d<(\d\d:\d\d|\?), +(\?|[\d.]+)(it/s|s/it)\]$")


def torch_profiler(directory, **fields):
    return ["--profiler-config",
            json.dumps({"profiler": "torch", "torch_profiler_dir": str(directory), **fields})]


def read_trace(path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


# ---------------------------------------------------------------- loading

def test_port_refuses_connections_until_loaded_then_health_200(server):
    server.start(env={"VLLM_STANDIN_LOAD_S": "3", "VLLM_STANDIN_SHARDS": "10"})
    server.wait_log(r"Loading safetensors checkpoint shards: +\d+% Completed \| 1/10 ")
    with pytest.raises(ConnectionRefusedError):  # mid-load: bound, not listening
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
    seen = server.wait_ready()
    assert seen and set(seen) == {None}, "only 'connection refused' before ready, never 503"
    response = server.get("/health")
    assert response.status_code == 200 and response.content == b""


def test_load_logs_progress_then_startup_lines_in_vllm_order(server, sandbox):
    for index in range(5):
        (sandbox.model / f"model-{index + 1:05d}-of-00005.safetensors").write_bytes(b"x")
    server.start(tp=2)
    server.wait_ready()
    log = server.log()
    raw = server.log_path.read_bytes().decode()  # log() reads "\r" as a line end
    # tqdm's own output: "\r" + the bar + "\n", no process prefix, rank 0 only
    progress = re.findall(r"^\r(Loading safetensors checkpoint shards: .*)$", raw, re.M)
    assert len(progress) == 6  # 0/5 .. 5/5, one line each
    assert raw.count("Loading safetensors checkpoint shards") == 6
    assert "\r" + progress[-1] + "\n\n" in raw, "closing the bar adds a newline"
    for n, line in enumerate(progress):
        match = PROGRESS.match(line)
        assert match, line
        assert (int(match["n"]), int(match["total"])) == (n, 5)
        assert match["pct"] == f"{100 * n / 5:3.0f}"
    order = ["Loading safetensors checkpoint shards: 100% Completed | 5/5",
             "Loading weights took", "Model loading took", "GiB memory and",
             "init engine (profile, create kv cache, warmup model) took",
             f"Starting vLLM server on http://127.0.0.1:{server.port}",
             "Application startup complete."]
    positions = [log.index(text) for text in order]
    assert positions == sorted(positions)
    assert re.search(r"INFO \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+\.py:\d+\] Loading weights "
                     r"took [\d.]+ seconds", log)
    assert re.search(r"^\(EngineCore_DP0 pid=\d+\) INFO .* init engine \(profile, create kv "
                     r"cache, warmup model\) took [\d.]+ s$", log, re.M)
    # uvicorn's lines carry no process prefix
    assert re.search(r"^INFO:     Application startup complete\.$", log, re.M)
    assert "Uvicorn running on" not in log


def test_shard_count_falls_back_to_env_knob(server):
    server.start(env={"VLLM_STANDIN_SHARDS": "3"})
    server.wait_ready()
    assert "| 3/3 [" in server.log()


def test_knob_file_sets_defaults_the_environment_overrides(server, sandbox):
    (sandbox.root / "standin.env").write_text(
        "# sandbox knobs\nVLLM_STANDIN_SHARDS=2\nGPU_SIM_TOTAL_MIB=1000\n"
        f"GPU_SIM_CLAIM_DIR={sandbox.root / 'loses'}\nPATH=/ignored\n")
    server.start()
    server.wait_ready()
    assert "| 2/2 [" in server.log()
    _, (worker,) = server.tree()
    assert (sandbox.claims / str(worker)).read_text().strip() == "950"  # env's dir won


# ---------------------------------------------------------------- processes

def test_process_tree_titles_device_files_and_memory_claims(server, sandbox):
    server.start(tp=2)
    server.wait_ready()
    engine, workers = server.tree()
    assert comm(engine) == "VLLM::EngineCor"
    assert cmdline(engine) == "VLLM::EngineCore"
    assert [comm(pid) for pid in workers] == ["VLLM::Worker_TP"] * 2
    assert [cmdline(pid) for pid in workers] == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]
    for rank, pid in enumerate(workers):
        assert str(sandbox.dev / f"nvidia{rank}") in fd_targets(pid)
        assert (sandbox.claims / str(pid)).read_text().strip() == str(CLAIM_MIB)
    assert not any("nvidia" in target for target in fd_targets(server.proc.pid))


def test_at_tp_1_the_worker_is_titled_without_a_rank(server, sandbox):
    server.start(tp=1)
    server.wait_ready()
    _, (worker,) = server.tree()
    assert (comm(worker), cmdline(worker)) == ("VLLM::Worker", "VLLM::Worker")
    assert re.search(r"^\(Worker pid=\d+\) INFO", server.log(), re.M)
    holders = sandbox.smi("--query-compute-apps=pid,process_name", "--format=csv,noheader")
    assert holders.stdout.splitlines() == [f"{worker}, VLLM::Worker"]


def test_sigterm_stops_the_whole_tree_and_exits_0(server, sandbox):
    server.start(tp=2)
    server.wait_ready()
    engine, workers = server.tree()
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    wait_for(lambda: not any(alive(pid) for pid in [engine, *workers]),
             what="engine and workers gone")
    assert list(sandbox.claims.iterdir()) == []
    assert "Application shutdown complete." in server.log()


def test_sigkill_of_api_server_leaves_engine_and_workers_holding_gpus(server, sandbox):
    server.start(tp=2)
    server.wait_ready()
    engine, workers = server.tree()
    server.proc.kill()
    server.wait_exit()
    time.sleep(1.5)  # vLLM's EngineCore does not notice promptly; neither may we
    assert alive(engine) and all(alive(pid) for pid in workers)
    holders = sandbox.smi("--query-compute-apps=pid,process_name", "--format=csv,noheader")
    assert holders.stdout.splitlines() == [f"{workers[0]}, VLLM::Worker_TP0",
                                           f"{workers[1]}, VLLM::Worker_TP1"]


def test_worker_ignoring_sigterm_is_killed_by_engine_on_shutdown(server, sandbox):
    sandbox.set_fault("worker-ignores-sigterm", "1")
    server.start(tp=2)
    server.wait_ready()
    engine, workers = server.tree()
    os.kill(workers[1], signal.SIGTERM)
    server.wait_log(r"Worker_TP1 pid=\d+\) WARNING .*ignoring it")
    assert alive(workers[1])
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    wait_for(lambda: not any(alive(pid) for pid in [engine, *workers]),
             what="engine and workers gone")
    assert re.search(rf"Worker pid {workers[1]} did not exit after SIGTERM; sending SIGKILL",
                     server.log())


def test_worker_ignoring_sigterm_with_empty_switch_means_every_rank(server, sandbox):
    sandbox.set_fault("worker-ignores-sigterm")
    server.start(tp=2)
    server.wait_ready()
    _, workers = server.tree()
    for pid in workers:
        os.kill(pid, signal.SIGTERM)
    time.sleep(0.5)
    assert all(alive(pid) for pid in workers)


# ---------------------------------------------------------------- faults

def test_engine_death_answers_503_then_exits_0(server, sandbox):
    server.start(tp=2)
    server.wait_ready()
    engine, workers = server.tree()
    sandbox.set_fault("engine-dies")
    statuses = []

    def probe():
        try:
            statuses.append(server.get("/health", timeout=5).status_code)
        except requests.ConnectionError:
            statuses.append(None)
        return server.proc.poll() is not None

    wait_for(probe, what="server exit after engine death")
    assert server.proc.returncode == 0
    assert 503 in statuses, statuses
    after = statuses[statuses.index(503):]
    assert set(after) <= {503, None}, "never healthy again once the engine died"
    wait_for(lambda: not any(alive(pid) for pid in [engine, *workers]),
             what="engine and workers gone")
    assert list(sandbox.claims.iterdir()) == []
    log = server.log()
    assert "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup" in log
    assert "EngineDeadError: EngineCore encountered an issue." in log


def test_killed_worker_takes_the_engine_down_and_the_server_exits_0(server, sandbox):
    server.start(tp=2)
    server.wait_ready()
    engine, workers = server.tree()
    os.kill(workers[1], signal.SIGKILL)
    assert server.wait_exit() == 0
    wait_for(lambda: not alive(engine) and not alive(workers[0]), what="tree gone")
    assert "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down " \
           "executor." in server.log()


def test_engine_death_during_load_fails_startup_non_zero(server, sandbox):
    sandbox.set_fault("engine-dies-during-load")
    server.start(tp=2, env={"VLLM_STANDIN_SHARDS": "20", "VLLM_STANDIN_LOAD_S": "2"})
    assert server.wait_exit() == 1
    log = server.log()
    assert "RuntimeError: Engine core initialization failed. See root cause above. " \
           "Failed core proc(s): {'EngineCore_DP0': 1}" in log
    shown = [int(m) for m in re.findall(r"\| (\d+)/20 \[", log)]
    assert shown and 0 < max(shown) < 20, "dies part-way through the shards"
    assert "Application startup complete." not in log
    with pytest.raises(requests.ConnectionError):
        server.get("/health")
    wait_for(lambda: list(sandbox.claims.iterdir()) == [], what="workers released GPUs")


def test_a_once_fault_fires_one_time(server, sandbox):
    sandbox.set_fault("engine-dies-during-load", "once")
    server.start(tp=1, env={"VLLM_STANDIN_SHARDS": "20", "VLLM_STANDIN_LOAD_S": "2"})
    assert server.wait_exit() == 1
    assert not (sandbox.faults / "engine-dies-during-load").exists(), "a one-shot switch is removed when it fires"


def test_an_after_fault_lets_that_many_starts_go_by_then_fires_once(server, sandbox):
    switch = sandbox.faults / "engine-dies-during-load"
    sandbox.set_fault("engine-dies-during-load", "after 1")
    env = {"VLLM_STANDIN_SHARDS": "20", "VLLM_STANDIN_LOAD_S": "2"}
    server.start(tp=1, env=env)
    server.wait_ready()  # the first start went by, counted once although the switch is read every 0.1 s
    assert switch.read_text().strip() == "once"
    server.kill_all()
    server.start(tp=1, env=env)
    assert server.wait_exit() == 1
    assert "(stand-in fault engine-dies-during-load)" in server.log()
    assert not switch.exists()


def test_missing_gpu_device_fails_like_vllm(server, sandbox):
    (sandbox.dev / "nvidia1").unlink()
    server.start(tp=2)
    assert server.wait_exit() == 1
    log = server.log()
    assert "No CUDA GPUs are available" in log
    assert "Engine core initialization failed" in log


@pytest.mark.parametrize("extra, message", [
    (["--profiler-config", "{not json"], "cannot be converted"),
    (["--profiler-config", '{"profiler": "torch"}'],
     "torch_profiler_dir must be set when profiler is 'torch'"),
    (["--profiler-config", '{"profiler": "torch", "torch_profiler_dir": "rel/dir"}'],
     "torch_profiler_dir must be an absolute path"),
    (["--profiler-config", '{"profiler": "nsys", "torch_profiler_dir": "/tmp/x"}'],
     "Input should be 'torch' or 'cuda'"),
    (["--profiler-config", '{"profiler": "torch", "torch_profiler_dir": "/tmp/x", '
      '"bogus": 1}'], "Extra inputs are not permitted"),
])
def test_bad_profiler_config_is_rejected_before_loading(server, extra, message):
    server.start(*extra)
    status = server.wait_exit()
    assert status in (1, 2) and status != 0
    log = server.log()
    assert message in log
    assert "VLLM::" not in log and "Loading safetensors" not in log


def test_missing_model_dir_exits_1_with_vllm_message(server, sandbox):
    server.start(model=sandbox.root / "no-such-model")
    assert server.wait_exit() == 1
    assert "Invalid repository ID or local directory specified: " \
           f"'{sandbox.root / 'no-such-model'}'" in server.log()


def test_unknown_flags_are_accepted_with_a_notice(server):
    server.start("--trust-remote-code", "--tool-call-parser", "kimi_k2", "--reasoning-parser",
                 "kimi_k2", "--enable-auto-tool-choice", "--enforce-eager",
                 "--kv-cache-dtype", "fp8", "--disable-log-requests")
    server.wait_ready()
    assert "stand-in ignores flags it does not model: ['--kv-cache-dtype', 'fp8', " \
           "'--disable-log-requests']" in server.log()


def test_cli_without_serve_is_a_usage_error():
    result = subprocess.run([sys.executable, str(VLLM), "bench"], capture_output=True,
                            text=True, timeout=WAIT_S)
    assert result.returncode == 2 and "usage" in result.stderr


def test_bench_fails_while_its_fault_switch_is_on(tmp_path):
    env = dict(os.environ, VLLM_STANDIN_FAULT_DIR=str(tmp_path))
    argv = [sys.executable, str(VLLM), "bench", "serve", "--help"]
    (tmp_path / "bench-fails").touch()
    failed = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S, env=env)
    assert failed.returncode == 1 and "bench-fails" in failed.stderr
    (tmp_path / "bench-fails").unlink()
    assert subprocess.run(argv, capture_output=True, text=True, timeout=WAIT_S, env=env).returncode == 0


# ---------------------------------------------------------------- HTTP API

def test_version_models_404_and_405(server):
    server.start("--served-model-name", "kimi-k2.5")
    server.wait_ready()
    assert server.get("/version").json() == {"version": "0.32.0"}
    models = server.get("/v1/models").json()
    assert models["object"] == "list"
    (entry,) = models["data"]
    assert (entry["id"], entry["root"], entry["max_model_len"]) == \
        ("kimi-k2.5", str(server.sandbox.model), 4096)
    missing = server.get("/nope")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    assert server.post("/health").status_code == 405
    assert server.post("/start_profile").status_code == 404  # no --profiler-config


def test_completion_returns_max_tokens_and_updates_metrics(server):
    server.start()
    server.wait_ready()
    body = server.post("/v1/completions", json={
        "model": str(server.sandbox.model), "prompt": "two words", "max_tokens": 7}).json()
    assert body["object"] == "text_completion"
    assert len(body["choices"][0]["text"].split()) == 7
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 7, "total_tokens": 9,
                             "prompt_tokens_details": None, "completion_tokens_details": None}
    metrics = server.get("/metrics").text
    label = f'model_name="{server.sandbox.model}"'
    assert re.search(rf'^vllm:generation_tokens_total{{.*{re.escape(label)}.*}} 7\.0$',
                     metrics, re.M)
    assert re.search(r"^vllm:prompt_tokens_total\{.*\} 2\.0$", metrics, re.M)
    assert re.search(r"^vllm:num_requests_running\{.*\} 0\.0$", metrics, re.M)
    assert f'vllm:request_success_total{{engine="0",finished_reason="length",{label}}} 1.0' \
        in metrics
    assert f'vllm:request_success_total{{engine="0",finished_reason="stop",{label}}} 0.0' \
        in metrics
    for hist, count in (("time_to_first_token_seconds", 1), ("e2e_request_latency_seconds", 1),
                        ("inter_token_latency_seconds", 6),
                        ("request_time_per_output_token_seconds", 1)):
        assert re.search(rf"^vllm:{hist}_count\{{.*\}} {count}\.0$", metrics, re.M), hist
        assert re.search(rf'^vllm:{hist}_bucket\{{engine="0",le="\+Inf",{re.escape(label)}\}} '
                         rf"{count}\.0$", metrics, re.M), "labels sorted by name, as vLLM's"
        assert re.search(rf"^vllm:{hist}_sum\{{.*\}} [\d.e-]+$", metrics, re.M)


def test_request_token_histograms_count_each_finished_request(server):
    max_model_len = 4096  # what Server.start passes
    server.start(env={"VLLM_STANDIN_TTFT_MS": "1", "VLLM_STANDIN_TPOT_MS": "1"})
    server.wait_ready()
    # (prompt, max_tokens) -> each sequence's (prompt tokens, generated tokens)
    sent = [("two words", 7), (list(range(150)), 1), (list(range(20)), 5),
            (["a b c", "one two three four five six"], 12),  # two sequences, one request
            (list(range(4000)), 500)]  # max_tokens cut to what fits: 96
    for prompt, max_tokens in sent:
        assert server.post("/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens}).ok
    prompts, generated = [2, 150, 20, 3, 6, 4000], [7, 1, 5, 12, 12, max_model_len - 4000]
    # vLLM's request_tokens buckets: 1, 2, 5 times each power of ten, up to max_model_len
    bounds = sorted(m * 10**e for m in (1, 2, 5) for e in range(10) if m * 10**e <= max_model_len)
    assert bounds[-1] == 2000
    metrics = server.get("/metrics").text
    label = f'model_name="{server.sandbox.model}"'
    for name, values in (("vllm:request_prompt_tokens", prompts),
                         ("vllm:request_generation_tokens", generated)):
        buckets = re.findall(rf'^{name}_bucket{{engine="0",le="([^"]+)",{re.escape(label)}}} (\S+)$',
                             metrics, re.M)
        assert buckets == [(f"{float(b)}", f"{float(sum(v <= b for v in values))}") for b in bounds] \
            + [("+Inf", f"{float(len(values))}")], name
        assert f"{name}_count{{engine=\"0\",{label}}} {float(len(values))}" in metrics.splitlines()
        assert f"{name}_sum{{engine=\"0\",{label}}} {float(sum(values))}" in metrics.splitlines()
        assert f"# TYPE {name} histogram" in metrics


def test_streamed_completion_is_sse_ending_with_done(server):
    server.start("--served-model-name", "kimi")
    server.wait_ready()
    response = server.post("/v1/completions", stream=True, json={
        "model": "kimi", "prompt": "hello", "max_tokens": 4, "stream": True,
        "stream_options": {"include_usage": True}})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [line[len("data: "):] for line in response.iter_lines(decode_unicode=True)
              if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    tokens = [c["choices"][0]["text"] for c in chunks if c["choices"]]
    assert len(tokens) == 4
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_completion_errors_are_openai_shaped(server):
    server.start("--served-model-name", "kimi")
    server.wait_ready()
    wrong = server.post("/v1/completions", json={"model": "other", "prompt": "x"})
    assert (wrong.status_code, wrong.json()) == (404, {"error": {
        "message": "The model `other` does not exist. Valid aliases: kimi.",
        "type": "NotFoundError", "param": "model", "code": 404}})
    too_long = server.post("/v1/completions", json={"model": "kimi", "prompt": "x",
                                                    "max_tokens": 5000})
    assert too_long.status_code == 400
    assert too_long.json()["error"]["message"] == (
        "max_tokens=5000 cannot be greater than max_model_len=4096. Please request fewer "
        "output tokens. (parameter=max_tokens, value=5000)")
    huge = server.post("/v1/completions", json={"model": "kimi", "prompt": "x " * 5000,
                                                "max_tokens": 1})
    assert (huge.status_code, huge.json()["error"]["param"]) == (400, "input_tokens")
    # prompt + max_tokens over the limit: vLLM cuts max_tokens to what fits
    cut = server.post("/v1/completions", json={"model": "kimi", "prompt": "x " * 4090,
                                               "max_tokens": 100}).json()
    assert (cut["usage"]["completion_tokens"], cut["choices"][0]["finish_reason"]) == (
        6, "length")


def test_error_messages_hide_file_paths_as_vllm_does(server):
    server.start()
    server.wait_ready()
    wrong = server.post("/v1/completions", json={"model": "other", "prompt": "x"})
    message = wrong.json()["error"]["message"]
    assert message == "The model `other` does not exist. Valid aliases: <path>", message


def test_api_key_guards_only_v1_paths_and_is_never_logged(server):
    secret = "sk-standin-secret-123"
    server.start(env={"VLLM_API_KEY": secret})
    server.wait_ready()
    assert server.get("/v1/models").status_code == 401
    assert server.get("/v1/models").json() == {"error": "Unauthorized"}
    auth = {"Authorization": f"Bearer {secret}"}
    assert server.get("/v1/models", headers=auth).status_code == 200
    assert server.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code \
        == 401
    for path in ("/health", "/metrics", "/version"):
        assert server.get(path).status_code == 200, path
    engine, workers = server.tree()
    for pid in [engine, *workers]:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            assert secret.encode() not in handle.read()
    assert secret not in server.log()


def test_api_key_flag_is_redacted_in_the_args_log(server):
    server.start("--api-key", "sk-flag-secret")
    server.wait_ready()
    assert server.get("/v1/models").status_code == 401
    assert "sk-flag-secret" not in server.log()


# ---------------------------------------------------------------- profiler

def test_profile_writes_one_synthetic_trace_per_rank(server, sandbox):
    server.start(*torch_profiler(sandbox.traces), tp=2)
    server.wait_ready()
    idle = server.post("/stop_profile")  # nothing running: vLLM answers 200 all the same
    assert (idle.status_code, idle.content) == (200, b"")
    assert not sandbox.traces.exists()
    start = server.post("/start_profile", json={"profile_prefix": "camp"})
    assert (start.status_code, start.content) == (200, b"")
    again = server.post("/start_profile")
    assert (again.status_code, again.json()["error"]["type"]) == (409, "Conflict")
    server.post("/v1/completions", json={"prompt": "x", "max_tokens": 3})
    stop = server.post("/stop_profile")
    assert (stop.status_code, stop.content) == (200, b"")
    names = sorted(p.name for p in sandbox.traces.iterdir())
    for rank in (0, 1):
        worker = f"camp_dp0_pp0_tp{rank}_dcp0_ep0_rank{rank}"
        (trace_name,) = [n for n in names if re.fullmatch(
            rf"{worker}\.\d{{19}}\.pt\.trace\.json\.gz", n)]
        trace = read_trace(sandbox.traces / trace_name)
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == 2
        assert (trace["vllm_version"], trace["vllm_version_tuple"]) == ("0.32.0",
                                                                        ["0", "32", "0"])
        kernels = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "kernel"}
        assert any(k.startswith("ncclDevKernel_AllReduce") for k in kernels)
        steps = [e for e in trace["traceEvents"] if e.get("cat") == "gpu_user_annotation"]
        assert steps and all(e["name"] == "execute_context_0(0)_generation_1(1)"
                             for e in steps)
        assert f"VLLM::Worker_TP{rank}" in {e["args"]["name"] for e in trace["traceEvents"]
                                            if e.get("name") == "process_name"}
        assert "Self CUDA" in (sandbox.traces / f"{worker}.profiler_out.txt").read_text()
    frontend = [n for n in names if re.fullmatch(
        r"camp_.+_\d+\.async_llm\.\d+\.pt\.trace\.json\.gz", n)]
    assert len(frontend) == 1 and f"_{server.proc.pid}.async_llm." in frontend[0]
    (table,) = [n for n in names if n.endswith(".async_llm.profiler_out.txt")]
    assert table.startswith("camp_")
    assert len(names) == 6, names  # 2 traces, 2 tables, the frontend's trace and table
    log = server.log()
    order = ["Stopping profiler...", "Profiler was not started, nothing to stop.",
             "Profiler stopped.", "Starting profiler...",
             "Torch profiling enabled. Traces will be saved to:", "Profiler started.",
             "Starting profiler...", "Stopping profiler...", "Profiler stopped successfully.",
             "Profiler stopped."]
    position = 0
    for text in order:
        position = log.index(text, position) + len(text)
    # rank 0 and the API server print() their tables: no process prefix
    assert len(re.findall(r"^ +Name +Self CUDA", log, re.M)) == 2, "rank 0 + frontend"
    again = server.post("/stop_profile")  # after a profile: 200, nothing more written
    assert again.status_code == 200
    assert sorted(p.name for p in sandbox.traces.iterdir()) == names


def test_profile_honours_gzip_frontend_and_table_switches(server, sandbox):
    server.start(*torch_profiler(sandbox.traces, torch_profiler_use_gzip=False,
                                 ignore_frontend=True,
                                 torch_profiler_dump_cuda_time_total=False))
    server.wait_ready()
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile").status_code == 200
    (name,) = [p.name for p in sandbox.traces.iterdir()]
    assert re.fullmatch(r"dp0_pp0_tp0_dcp0_ep0_rank0\.\d+\.pt\.trace\.json", name)
    read_trace(sandbox.traces / name)


def test_profile_accepts_the_dotted_cli_form(server, sandbox):
    server.start("--profiler-config.profiler=torch",
                 f"--profiler-config.torch_profiler_dir={sandbox.traces}",
                 "--profiler-config.ignore_frontend", "true")
    server.wait_ready()
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile").status_code == 200
    assert [p.name for p in sandbox.traces.iterdir() if "async_llm" in p.name] == []


def test_traces_are_retimed_copies_of_the_templates(server, sandbox, templates):
    before_ns = time.time_ns()
    server.start(*torch_profiler(sandbox.traces), tp=3,
                 env={"VLLM_STANDIN_TRACE_TEMPLATES": str(templates)})
    server.wait_ready()
    started_ns = time.time_ns()
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile").status_code == 200
    stopped_ns = time.time_ns()
    earliest = []
    for rank in range(3):
        (path,) = sandbox.traces.glob(f"dp0_pp0_tp{rank}_dcp0_ep0_rank{rank}.*.pt.trace.json.gz")
        trace = read_trace(path)
        template = read_trace(templates / f"tp2_rank{rank % 2}.pt.trace.json.gz")
        assert len(trace["traceEvents"]) == len(template["traceEvents"])
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["distributedInfo"]["world_size"] == 3
        names = {e["name"] for e in trace["traceEvents"]
                 if e.get("cat") in ("user_annotation", "gpu_user_annotation")}
        assert "decode_step" not in names
        assert "execute_context_0(0)_generation_1(1)" in names
        stamps = [e["ts"] for e in trace["traceEvents"] if "ts" in e]
        first_ns = trace["baseTimeNanoseconds"] + min(stamps) * 1000
        assert before_ns <= first_ns <= stopped_ns
        earliest.append(first_ns)
    assert started_ns - 10**9 <= min(earliest)
    # ranks keep the templates' alignment: rank 1 started ~270 ms before rank 0
    template_gap = 5140644338693.713 - 5140644068584.88
    assert abs((earliest[0] - earliest[1]) / 1000 - template_gap) < 1000


def test_detailed_trace_annotation_names_the_steps_as_vllm_does(server, sandbox, templates):
    server.start(*torch_profiler(sandbox.traces, detailed_trace_annotation=True), tp=2,
                 env={"VLLM_STANDIN_TRACE_TEMPLATES": str(templates)})
    server.wait_ready()
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile").status_code == 200
    for rank in range(2):
        (path,) = sandbox.traces.glob(f"dp0_pp0_tp{rank}_dcp0_ep0_rank{rank}.*.pt.trace.json.gz")
        events = read_trace(path)["traceEvents"]
        cpu = sorted((e["ts"], e["name"], e["args"]["External id"]) for e in events
                     if e.get("cat") == "user_annotation" and e["name"].startswith("execute_"))
        gpu = {e["args"]["External id"]: e["name"] for e in events
               if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("execute_")}
        # one decode request whose key length grows by one token a step, as vLLM writes it
        assert [name for _, name, _ in cpu] == [
            f"execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk{128 + k}sqsq1sqsk{128 + k})"
            for k in range(12)]
        assert all(gpu[ext] == name for _, name, ext in cpu)  # each GPU twin has its CPU span's name


def test_truncate_trace_fault_corrupts_only_that_rank(server, sandbox):
    server.start(*torch_profiler(sandbox.traces), tp=2)
    server.wait_ready()
    sandbox.set_fault("truncate-trace-rank-1")
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile").status_code == 200
    (good,) = sandbox.traces.glob("dp0_pp0_tp0_*.gz")
    (bad,) = sandbox.traces.glob("dp0_pp0_tp1_*.gz")
    read_trace(good)
    with pytest.raises((EOFError, OSError, ValueError)):
        read_trace(bad)


def test_stop_profile_hang_fault_never_answers(server, sandbox):
    server.start(*torch_profiler(sandbox.traces))
    server.wait_ready()
    assert server.post("/start_profile").status_code == 200
    sandbox.set_fault("stop-profile-hangs")
    with pytest.raises(requests.ReadTimeout):
        server.post("/stop_profile", timeout=2)
    assert server.get("/health").status_code == 200
    server.proc.send_signal(signal.SIGTERM)
    assert server.wait_exit() == 0


def test_unwritable_trace_dir_still_answers_200_with_a_warning(server, sandbox):
    blocker = sandbox.root / "file"
    blocker.write_text("")
    server.start(*torch_profiler(blocker / "traces"))
    server.wait_ready()
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile").status_code == 200
    assert "Failed to stop profiler: Can't create directory" in server.log()


# --- --middleware: the project's loopback fence, run as vLLM runs it (before the API key) ---

def test_the_fence_refuses_the_profiler_to_other_clients_and_passes_the_rest(server, tmp_path):
    secret = "sk-fence-test"
    server.start("--host", "0.0.0.0", "--served-model-name", "kimi", "--middleware", "vllm_ops_fence.LoopbackFence",
                 *torch_profiler(tmp_path / "traces"),
                 env={"PYTHONPATH": str(FENCE_DIR), "VLLM_API_KEY": secret})
    server.wait_ready()
    outside = own_address()
    auth = {"Authorization": f"Bearer {secret}"}
    for path in ("/start_profile", "/stop_profile"):
        status, body = request_from(outside, server.port, "POST", path, headers=auth)
        assert status == 403 and json.loads(body)["error"]["code"] == 403, (path, body)
    # The fence runs before the API key: no key needed to be refused, none given to pass.
    assert request_from(outside, server.port, "POST", "/start_profile")[0] == 403
    assert request_from(outside, server.port, "GET", "/v1/models")[0] == 401
    assert request_from(outside, server.port, "GET", "/health")[0] == 200
    status, body = request_from(outside, server.port, "POST", "/v1/completions", headers=auth, body={
        "model": "kimi", "prompt": "hello", "max_tokens": 3, "stream": True})
    assert status == 200 and body.decode().rstrip().endswith("data: [DONE]")
    # From loopback the profiler answers as without the fence.
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile", timeout=60).status_code == 200
    assert re.search(rf'{re.escape(outside)}:\d+ - "POST /start_profile HTTP/1.1" 403', server.log())


def test_the_traffic_recorder_behind_the_fence_sees_each_request_and_its_answer(server, tmp_path):
    """Both middlewares as the vllm role loads them (the fence outermost): the recorder gets the request's
    body and the endpoint's response, whole or streamed, and the stand-in's /tokenize for the prompt's ids."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "vllm_ops_traffic.py").symlink_to(ROOT / "plugins" / "module_utils" / "traffic.py")
    recordings = tmp_path / "traffic"
    server.start("--served-model-name", "kimi", "--middleware", "vllm_ops_fence.LoopbackFence",
                 "--middleware", "vllm_ops_traffic.TrafficRecorder",
                 env={"PYTHONPATH": f"{FENCE_DIR}:{lib}", "VLLM_OPS_TRAFFIC_DIR": str(recordings),
                      "VLLM_OPS_TRAFFIC_BLOCK": "2"})
    server.wait_ready()
    shared = "one two three four"
    whole = server.post("/v1/completions", json={"model": "kimi", "prompt": f"{shared} five", "max_tokens": 3})
    assert whole.status_code == 200 and whole.json()["usage"]["completion_tokens"] == 3
    streamed = server.post("/v1/completions", json={"model": "kimi", "prompt": f"{shared} six seven",
                                                    "max_tokens": 4, "stream": True})
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    tokens = server.post("/tokenize", json={"prompt": shared}).json()
    assert tokens["count"] == 4 and len(set(tokens["tokens"])) == 4

    def lines():
        return [json.loads(line) for path in sorted(recordings.glob("traffic-*.jsonl"))
                for line in path.read_text().splitlines()]

    wait_for(lambda: len(lines()) == 2, what="two recorded requests")
    first, second = lines()
    assert (first["input_length"], first["output_length"], first["stream"]) == (5, 3, False)
    assert (second["input_length"], second["output_length"], second["stream"]) == (6, 4, True)
    assert first["hash_ids"][:2] == second["hash_ids"][:2] and first["hash_ids"][2] != second["hash_ids"][2]
    assert "one" not in "".join(p.read_text() for p in recordings.iterdir())


def test_a_middleware_that_cannot_be_imported_fails_after_the_load(server):
    server.start("--middleware", "no_such_module.Fence")
    assert server.wait_exit() == 1
    assert "ModuleNotFoundError: No module named 'no_such_module'" in server.log()
