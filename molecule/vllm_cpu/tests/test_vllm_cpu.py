"""The roles and the campaign against vLLM's real CPU build, deployed by converge.

Tests run in file order; each leaves the normal service up. A restart is a real load (about a
minute), so the suite restarts the service only where the behaviour under test needs it.
"""

from __future__ import annotations

import gzip
import json
import re

import pytest

from conftest import MODEL, SERVER_ENV, VENV
from testlib import (
    INCIDENTS,
    UNIT,
    holders,
    in_flight,
    incident_names,
    read_incident,
    start_traffic,
    stop_traffic,
    wait_for,
)

BASE = "http://127.0.0.1:8000"
TRACE_DIR = "/var/lib/vllm/traces"
RELEASE = "Release the GPU device nodes held by the service"


def http(host, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
    """Status and body of a request sent from the host itself (the server listens on loopback)."""
    data = f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'" if body is not None else ""
    out = host.run(f"curl -s -o /tmp/answer -w '%{{http_code}}' -X {method} {data} {BASE}{path}; echo; cat /tmp/answer")
    status, _, text = out.stdout.partition("\n")
    return int(status), text


def decode_annotations(trace) -> int:
    """Decode steps in a trace, counted plainly: CPU annotations of steps that generated tokens."""
    with gzip.open(trace, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    return sum(1 for e in events if e.get("cat") == "user_annotation"
               and re.fullmatch(r"execute_context_0\(0\)_generation_[1-9]\d*\(\d+\)", e.get("name", "")))


def main_pid(host) -> int:
    return int(host.check_output(f"systemctl show -p MainPID --value {UNIT}"))


def process_tree(host, pid: int) -> dict[int, str]:
    """PID -> comm of pid and all its descendants."""
    out = host.check_output("ps -e -o pid=,ppid=,comm=")
    parent, comm = {}, {}
    for line in out.splitlines():
        p, pp, name = line.split(None, 2)
        parent[int(p)], comm[int(p)] = int(pp), name
    tree, todo = {}, [pid]
    while todo:
        current = todo.pop()
        tree[current] = comm.get(current, "")
        todo.extend(p for p, pp in parent.items() if pp == current)
    return tree


def test_converge_runs_the_real_server_with_the_production_templates(host):
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    pid = main_pid(host)
    argv = host.file(f"/proc/{pid}/cmdline").content.split(b"\0")
    assert [a.decode() for a in argv[1:4]] == [f"{VENV}/bin/vllm", "serve", MODEL]
    assert b"--tensor-parallel-size" in argv and b"--profiler-config" not in argv
    names = sorted(process_tree(host, pid).values())
    assert "VLLM::EngineCor" in names and "VLLM::Worker" in names, names
    journal = host.check_output(f"journalctl -u {UNIT} --no-pager -o cat")
    assert re.search(r"Loading safetensors checkpoint shards: +100% Completed \| 4/4", journal)
    assert "Application startup complete." in journal


def test_the_api_answers_like_vllm(host):
    assert http(host, "GET", "/health") == (200, "")
    status, text = http(host, "GET", "/version")
    assert status == 200 and json.loads(text) == {"version": "0.32.0"}
    status, text = http(host, "GET", "/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == ["tiny-llama"]
    status, text = http(host, "POST", "/v1/completions",
                        {"model": "tiny-llama", "prompt": "the gpu", "max_tokens": 8, "ignore_eos": True})
    assert status == 200, text
    answer = json.loads(text)
    assert answer["usage"]["completion_tokens"] == 8 and answer["choices"][0]["text"]
    # The normal service has no profiler.
    assert http(host, "POST", "/start_profile")[0] == 404


def test_the_simulated_gpu_is_held_by_the_real_engine_and_worker(host):
    pid = main_pid(host)
    tree = process_tree(host, pid)
    held = set(holders(host, "/dev/nvidia0"))
    workers = {p for p, name in tree.items() if name in ("VLLM::EngineCor", "VLLM::Worker")}
    assert len(workers) == 2 and workers <= held
    apps = host.check_output("nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader")
    assert workers <= {int(line.split(",")[0]) for line in apps.splitlines()}


def requests_running(host) -> float:
    text = http(host, "GET", "/metrics")[1]
    return sum(float(v) for v in re.findall(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, re.M))


def test_the_watch_restarts_the_real_server_whose_engine_stopped_under_load(host, healthy_after):
    """vLLM's EngineCore SIGSTOPped with requests running: the watch (stall time 30 s, host_vars) keeps
    the Python stack of every process (the stopped engine's read without attaching), names the engine,
    restarts the server through systemd and records the new start's load, phase by phase."""
    pid = main_pid(host)
    invocation = host.check_output(f"systemctl show -p InvocationID --value {UNIT}")
    (engine,) = [p for p, name in process_tree(host, pid).items() if name == "VLLM::EngineCor"]
    before = incident_names(host)
    start_traffic(host, "tiny-llama", tokens=256)
    try:
        wait_for(lambda: requests_running(host) > 0, "requests running")
        host.check_output(f"kill -STOP {engine}")
    finally:
        stop_traffic(host)
    wait_for(lambda: host.check_output(f"systemctl show -p InvocationID --value {UNIT}") != invocation
             and http(host, "GET", "/health")[0] == 200, "the watch's restart, healthy", timeout_s=300)
    assert main_pid(host) != pid
    wait_for(lambda: [read_incident(host, n)["action"].get("ok") for n in incident_names(host) - before] == [True],
             "the restart's outcome recorded", timeout_s=60)
    (name,) = incident_names(host) - before
    incident = read_incident(host, name)
    assert incident["verdict"].startswith(f"the engine (VLLM::EngineCore, pid {engine}) is stopped (State T "
                                          "(stopped), wait channel do_signal_stop) in "), incident["verdict"]
    by_role = {p["role"]: p for p in incident["processes"]}
    for role in ("API server", "engine", "worker"):
        assert by_role[role]["py_spy"] and any(t["frames"] for t in by_role[role]["py_spy"]), by_role[role]
    load = incident["action"]["load"]
    measured = {p["name"]: p["seconds"] for p in load["phases"] if p["status"] == "measured"}
    assert load["ready"] and measured.get("weights", 0) > 0 and load["vllm_version"] == "0.32.0", load


def step_state(host) -> dict:
    return json.loads(host.file(f"{INCIDENTS}/watch-state.json").content_string)["step"]


def judged(host, count: int, timeout_s: float = 120) -> list[dict]:
    """The next ``count`` intervals the watch judged against its baseline, as its state gives them."""
    seen: dict = {}

    def enough():
        latest = step_state(host)["latest"] or {}
        if latest.get("residual") is not None:
            seen[latest["steps"], latest["step_ms"]] = latest
        return len(seen) >= count

    wait_for(enough, f"{count} intervals judged", timeout_s=timeout_s)
    return list(seen.values())[:count]


# The engine and its worker stopped this share of every 100 ms: the steps of the same work take longer, as
# under the unit's CPUQuota=, which this sandbox cannot enforce (a container's systemd gets no cpu controller
# on cgroup v1: the quota is accepted and has no effect, checked).
THROTTLE = "/run/vllm-ops-test-throttle"
STOPPED_MS, PERIOD_MS = 40, 100


def test_the_watch_tells_the_real_server_slower_at_the_same_load(host, healthy_after):
    """vLLM's CPU build under two users: the watch's step model fits its baseline from the real /metrics, then
    reads the same load on engine processes throttled to 60% of the time as a slowdown beyond its band."""
    wait_for(lambda: in_flight(host) == 0, "the earlier tests' requests done", timeout_s=180)
    host.check_output(f"systemctl stop vllm-ops-watch && rm -f {INCIDENTS}/baseline.json "
                      "&& systemctl start vllm-ops-watch")
    engine = [p for p, name in process_tree(host, main_pid(host)).items()
              if name in ("VLLM::EngineCor", "VLLM::Worker")]
    start_traffic(host, "tiny-llama", senders=2, tokens=64)
    try:
        wait_for(lambda: step_state(host)["baseline"], "the baseline fitted on the real /metrics", timeout_s=180)
        baseline = step_state(host)["baseline"]
        assert baseline["intervals"] == 10 and 1.2 <= baseline["batch"][0] <= baseline["batch"][1] <= 2.0, baseline
        before = judged(host, 2)
        pids = " ".join(map(str, engine))
        cycle = (f"while [ -e {THROTTLE} ]; do kill -STOP {pids}; sleep {STOPPED_MS / 1000}; kill -CONT {pids}; "
                 f"sleep {(PERIOD_MS - STOPPED_MS) / 1000}; done; kill -CONT {pids}")
        host.check_output(f"touch {THROTTLE} && (nohup sh -c '{cycle}' >/dev/null 2>&1 &)")
        judged(host, 1)  # the interval the throttle began in
        wait_for(lambda: (step_state(host)["latest"] or {}).get("residual", 0) > step_state(host)["latest"]["band"],
                 "the residual beyond the band", timeout_s=60)
        latest = step_state(host)["latest"]
        # the same two users (the batch as before), each step the longer by the time the engine was stopped
        assert latest["residual"] > latest["band"] > 0 and latest["batch"] >= 1.2, latest
        assert latest["step_ms"] > 1.25 * max(i["step_ms"] for i in before), (latest, before)
    finally:
        host.run(f"rm -f {THROTTLE}")
        stop_traffic(host)
        host.run(f"sleep 0.5; kill -CONT {' '.join(map(str, engine))}")


def test_a_campaign_profiles_the_real_server_and_restores_it(host, play, tmp_path, healthy_after):
    artifacts = tmp_path / "artifacts"
    run = play("profile.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}))
    assert run.rc == 0, run.output[-4000:]
    # The health waits printed the real server's progress from the journal.
    assert re.search(r"4/4 shards loaded", run.output), run.output[-4000:]
    # The release check before the switch read the help the release's first check (converge's) kept.
    check = run.result("Check the unit's arguments against the vLLM release that will run them")
    assert check["checked"] and check["cached"] and check["version"] == "0.32.0", check
    (campaign_dir,) = [d for d in (artifacts / host.backend.hostname).iterdir() if d.is_dir()]
    traces = sorted(p.name for p in campaign_dir.glob("*.pt.trace.json.gz"))
    assert len(traces) == 1 and re.search(r"(^|_)rank0\.\d+\.pt\.trace\.json\.gz$", traces[0]), traces
    assert len(list(campaign_dir.glob("*rank0.profiler_out.txt"))) == 1
    # CPU traces carry no GPU kernel: the summary says "not measured", never a zero share.
    summary = json.loads((campaign_dir / "summary.json").read_text())
    assert summary["gpu_time_measured"] is False
    (rank,) = summary["ranks"]
    assert rank["gpu_kernels"] == 0 and rank["cuda_ms_per_step"] is None
    assert rank["decode_steps"] == decode_annotations(campaign_dir / traces[0]) > 0
    report = (campaign_dir / "report.md").read_text()
    assert "No GPU kernels in the traces: GPU time and all-reduce share not measured." in report
    assert "no GPU kernels in the traces: all-reduce share not measured" in run.output
    # Both of the campaign's loads (the profiling variant's, then the normal service's), phase by phase
    # from the real server's own lines: the phases measured sum to the time to ready, and the weights
    # phase, which every vLLM logs, is among them.
    job = json.loads((campaign_dir / "job.json").read_text())
    assert len(job["loads"]) == 2 and job["loads"][-1]["variant"] is None, job["loads"]
    for load in job["loads"]:
        measured = {p["name"]: p["seconds"] for p in load["phases"] if p["status"] == "measured"}
        assert load["ready"] and measured.get("weights", 0) > 0, load
        assert sum(measured.values()) == pytest.approx(load["total_s"], abs=0.01 * len(measured)), load
    assert "## Model loads" in report and "2 loads, ready in " in report
    # Nothing of the campaign is left on the host, and the normal service is back unchanged.
    assert host.run(f"ls -A {TRACE_DIR}").stdout.split() == []
    assert http(host, "POST", "/start_profile")[0] == 404


def test_restore_is_idempotent_on_the_real_server(host, play):
    before = host.check_output(f"systemctl show {UNIT} -p ActiveState -p MainPID -p ActiveEnterTimestamp")
    run = play("playbooks/restore.yml")
    assert run.rc == 0, run.output[-3000:]
    journal = host.run(f"journalctl -u {UNIT} --no-pager -o short-precise -n 400 | grep 'systemd\\['").stdout
    assert run.changed == 0, f"{run.changed_tasks}\nbefore the run: {before}\n{journal[-3000:]}"


def test_gpu_release_frees_a_real_server_left_outside_systemd(host, play):
    # The incident from the hand-run campaigns: a copy of the server started by hand keeps the
    # GPUs after the unit is stopped.
    host.check_output(f"systemctl stop {UNIT}")
    host.check_output(
        f"setsid -f env {SERVER_ENV} {VENV}/bin/vllm serve {MODEL} --port 8100 --max-model-len 1024 "
        ">/tmp/leftover.log 2>&1"
    )
    try:
        wait_for(lambda: host.run("curl -sf -o /dev/null http://127.0.0.1:8100/health").rc == 0,
                 "the hand-started server to be ready", timeout_s=600)
        # Anchored, so that the shell running pgrep does not match its own pattern.
        (api,) = host.check_output(f"pgrep -f '^{VENV}/bin/python {VENV}/bin/vllm serve .* --port 8100'").split()
        tree = process_tree(host, int(api))
        assert {"VLLM::EngineCor", "VLLM::Worker"} <= set(tree.values()), tree
        on_gpu = {pid for pid, name in tree.items() if name in ("vllm", "VLLM::EngineCor", "VLLM::Worker")}
        assert on_gpu <= set(holders(host, "/dev/nvidia0"))
        run = play("playbooks/release_gpus.yml")
        assert run.rc == 0, run.output[-3000:]
        assert on_gpu <= set(run.result(RELEASE)["signalled"])
        assert holders(host, "/dev/nvidia0") == []
        wait_for(lambda: not any(host.file(f"/proc/{pid}").exists for pid in tree),
                 "every process of the hand-started server to be gone")
    finally:
        host.run(f"pkill -9 -f '^{VENV}/bin/python {VENV}/bin/vllm serve .* --port 8100'")
    run = play("playbooks/restore.yml")
    assert run.rc == 0, run.output[-3000:]
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert http(host, "GET", "/health")[0] == 200


def test_the_allreduce_bench_measures_as_the_service_and_restores_it(host, play, tmp_path, healthy_after):
    # Two gloo ranks on the CPU with the venv's PyTorch: the plumbing of the GPU run, end to end.
    before = main_pid(host)
    artifacts = tmp_path / "artifacts"
    run = play("playbooks/allreduce_bench.yml", "-e", json.dumps({
        "vllm_job_artifacts_dir": str(artifacts), "allreduce_bench_world_size": 2,
        "allreduce_bench_variants": [{"name": "LL128", "environment": {"NCCL_PROTO": "LL128"}}]}))
    assert run.rc == 0, run.output[-4000:]
    (job,) = (artifacts / host.backend.hostname).iterdir()
    unit, ll128 = (json.loads((job / "allreduce" / f"allreduce-{n}.json").read_text()) for n in ("unit", "LL128"))
    # The unit's EnvironmentFile, read here from the host, is what the ranks saw; the variant's
    # value was laid over it.
    env_file = host.file(f"/etc/vllm/{UNIT}.env").content_string
    nccl = dict(line.split("=", 1) for line in env_file.splitlines() if line.startswith("NCCL_"))
    assert nccl and unit["environment"] == {k: v.strip('"') for k, v in nccl.items()}
    assert ll128["environment"] == dict(unit["environment"], NCCL_PROTO="LL128")
    assert unit["user"] == ll128["user"] == "vllm"
    assert unit["python"] == f"{VENV}/bin/python"
    assert (unit["backend"], unit["world_size"]) == ("gloo", 2)
    # The decode sizes come from the model's config.json, read here from the host.
    config = json.loads(host.file(f"{MODEL}/config.json").content_string)
    width = {"float32": 4, "bfloat16": 2, "float16": 2}[config.get("torch_dtype") or config.get("dtype")]
    sizes = {s["bytes"]: s["batch_size"] for s in unit["sizes"]}
    assert sizes[config["hidden_size"] * width] == 1 and sizes[config["hidden_size"] * 8 * width] == 8
    assert "- **LL128**: environment" in (job / "allreduce" / "allreduce.md").read_text()
    assert (job / "allreduce" / "allreduce.png").read_bytes()[:4] == b"\x89PNG"
    headline = run.result("Print the headline")["msg"]
    assert re.match(r"vllm-mol-cpu: all-reduce on 2 ranks \(gloo, no GPU\): batch 1 \(\d+ B\) [\d.]+ µs", headline)
    # The stop and the real load after it cost downtime, recorded as every job's is.
    down = json.loads((job / "job.json").read_text())["downtime"]
    assert down["gaps"] >= 1 and down["seconds_not_ready"] > 0, down
    assert f"; downtime {down['seconds_not_ready']:.1f} s in {down['gaps']} gap" in headline
    # The service was stopped for the measurement and is back; nothing is left on the host.
    assert main_pid(host) != before
    assert not host.file("/run/vllm-ops/allreduce-bench").exists
    assert not host.file("/run/vllm-ops/job.lock").exists


def test_an_armed_server_fences_its_profiler_from_other_clients(host, play, tmp_path, healthy_after):
    run = play("playbooks/deploy.yml", "-e", json.dumps({"vllm_profiler_armed": True}))
    assert run.rc == 0, run.output[-4000:]
    try:
        argv = host.file(f"/proc/{main_pid(host)}/cmdline").content.split(b"\0")
        assert argv[argv.index(b"--middleware") + 1] == b"vllm_ops_fence.LoopbackFence"
        assert b"vllm_ops_traffic.TrafficRecorder" in argv  # recording, as by default
        # The container's own address: a client that is not on loopback, as any other host would be.
        outside = host.check_output("hostname -I").split()[0]
        assert not outside.startswith("127.")

        def curl(base, method, path, body=None):
            data = f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'" if body is not None else ""
            out = host.check_output(f"curl -s -N -o /tmp/fence -w '%{{http_code}}' -X {method} {data} {base}{path}; "
                                    "echo; cat /tmp/fence")
            status, _, text = out.partition("\n")
            return int(status), text

        for path in ("/start_profile", "/stop_profile"):
            status, text = curl(f"http://{outside}:8000", "POST", path)
            assert status == 403 and json.loads(text)["error"]["code"] == 403, (path, text)
        streamed = {"model": "tiny-llama", "prompt": "the gpu", "max_tokens": 4, "ignore_eos": True, "stream": True}
        for base in (f"http://{outside}:8000", BASE):
            status, text = curl(base, "POST", "/v1/completions", streamed)
            assert status == 200 and text.rstrip().endswith("data: [DONE]"), (base, text)
        # From loopback the armed profiler captures the running server, bounded, with no restart.
        pid = main_pid(host)
        assert curl(BASE, "POST", "/start_profile", {"profile_prefix": "armed"})[0] == 200
        assert curl(BASE, "POST", "/v1/completions", dict(streamed, stream=False))[0] == 200
        assert curl(BASE, "POST", "/stop_profile")[0] == 200
        wait_for(lambda: any(n.startswith("armed") and n.endswith(".pt.trace.json.gz")
                             for n in host.run(f"ls {TRACE_DIR}").stdout.split()), "the armed capture's trace")
        assert main_pid(host) == pid
        journal = host.check_output(f"journalctl -u {UNIT} --no-pager -o cat")
        assert re.search(rf'{re.escape(outside)}:\d+ - "POST /start_profile HTTP/1.1" 403', journal)
        host.run(f"rm -f {TRACE_DIR}/armed*")
        # A campaign on the armed host profiles the real server as it runs: /health 200 throughout.
        artifacts = tmp_path / "artifacts"
        live = play("profile.yml", "-e", json.dumps({"vllm_profiler_armed": True,
                                                     "vllm_job_artifacts_dir": str(artifacts)}))
        assert live.rc == 0, live.output[-4000:]
        (campaign_dir,) = [d for d in (artifacts / host.backend.hostname).iterdir() if d.is_dir()]
        record = json.loads((campaign_dir / "campaign.json").read_text())
        assert record["path"].startswith("live") and record["downtime"]["polls"] > 0
        assert record["downtime"]["failed_polls"] == 0 and record["downtime"]["gaps"] == 0
        (trace,) = campaign_dir.glob("*.pt.trace.json.gz")
        assert decode_annotations(trace) > 0 and (campaign_dir / "report.md").exists()
        assert main_pid(host) == pid and host.run(f"ls -A {TRACE_DIR}").stdout.split() == []
    finally:
        host.run(f"rm -f {TRACE_DIR}/armed*")
        run = play("playbooks/deploy.yml")
        assert run.rc == 0, run.output[-4000:]
    assert not host.file("/usr/local/lib/vllm-ops/python/vllm_ops_fence.py").exists
    assert b"vllm_ops_fence.LoopbackFence" not in host.file(f"/proc/{main_pid(host)}/cmdline").content
