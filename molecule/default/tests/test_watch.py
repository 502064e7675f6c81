"""The watch (vllm-ops-watch.service) on the deployed host, its stall time 20 s (host_vars, as the
issue's acceptance test deploys it): an idle service watched for two minutes keeps its main process;
a load slower than the stall time is left alone; an engine stopped with SIGSTOP under load is found,
its evidence kept (a Python stack per process; a verdict naming the engine and its frame) and
restarted within two minutes; past the restart limit the watch restarts nothing and exits saying why;
playbooks/incidents.yml fetches and reads the incidents."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import FAULT_DIR, INCIDENTS, UNIT, in_flight, incident_names, read_incident, run_playbook, wait_for

WATCH = "vllm-ops-watch"
STALL_S = 20  # molecule/default/host_vars
SERVED = "kimi-k2.5"  # inventory/sandbox


def prop(host, unit, name):
    return host.check_output(f"systemctl show {unit} -p {name} --value")


def monotonic_s(host):
    return float(host.check_output("python3 -c 'import time; print(time.monotonic())'"))


def incidents(host):
    """Each incident.json on the host, oldest first."""
    return [read_incident(host, name) for name in sorted(incident_names(host))]


def engine_pid(host):
    """The EngineCore of the server, found in the unit's cgroup (never by name alone)."""
    group = prop(host, f"{UNIT}.service", "ControlGroup")
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        procs = host.file(f"{root}{group}/cgroup.procs")
        if procs.exists:
            for pid in procs.content_string.split():
                if host.file(f"/proc/{pid}/comm").content_string.strip().startswith("VLLM::EngineCor"):
                    return int(pid)
    raise AssertionError(f"no EngineCore in {group}")


def send_requests(host, n=4, tokens=4000):
    """``n`` completions in the background on the host (4000 tokens: 20 s at the stand-in's 5 ms)."""
    body = shlex.quote(json.dumps({"model": SERVED, "prompt": "hello", "max_tokens": tokens}))
    for _ in range(n):
        host.run(f"nohup curl -s -o /dev/null -m 600 -H 'Content-Type: application/json' -d {body} "
                 "http://127.0.0.1:8000/v1/completions >/dev/null 2>&1 &")
    wait_for(lambda: in_flight(host) > 0, "the requests in flight")


def healthy(host):
    return host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0


def test_the_watch_runs_as_its_own_user_with_ptrace_and_kill_only(host):
    assert host.service(WATCH).is_running and host.service(WATCH).is_enabled
    assert prop(host, WATCH, "User") == "vllm-ops-watch"
    assert set(prop(host, WATCH, "CapabilityBoundingSet").split()) == {"cap_kill", "cap_sys_ptrace"}
    config = json.loads(host.file("/usr/local/lib/vllm-ops/watch/watch.json").content_string)
    assert (config["unit"], config["stall_s"], config["url"]) == (f"{UNIT}.service", STALL_S, "http://127.0.0.1:8000")
    assert config["schema"] == "vllm-ops/watch-config/1"  # written by the module vllm_watch_config
    # its figures for Prometheus, written under the unit's sandbox and readable by node_exporter's user
    figures = host.file("/var/lib/vllm-ops/metrics/vllm_ops_watch.prom")
    wait_for(lambda: figures.exists, "the watch's figures for Prometheus")
    assert figures.mode == 0o644 and figures.user == "vllm-ops-watch"
    assert f'vllm_ops_watch_stalls_total{{unit="{UNIT}.service"}} 0' in figures.content_string


def test_an_idle_service_watched_for_two_minutes_keeps_its_main_pid(host):
    server = f"{UNIT}.service"
    main_pid = prop(host, server, "MainPID")
    watched_since = int(prop(host, WATCH, "ExecMainStartTimestampMonotonic")) / 1e6
    # the server started before the watch did, and nothing restarted it since
    assert int(prop(host, server, "ExecMainStartTimestampMonotonic")) / 1e6 < watched_since
    left = watched_since + 120 - monotonic_s(host)
    if left > 0:
        time.sleep(left)
    assert monotonic_s(host) - watched_since >= 120
    assert prop(host, server, "MainPID") == main_pid and incidents(host) == []
    state = json.loads(host.file(f"{INCIDENTS}/watch-state.json").content_string)
    assert state["said"] == "idle" and state["stall_s"] == STALL_S and state["restarts"] == []


def test_a_load_slower_than_the_stall_time_is_left_alone(host):
    """A start whose load outlasts the stall time (30 s against 20, the stand-in's load-slow): /metrics
    refuses connections the whole load, so the watch says so and does nothing."""
    server = f"{UNIT}.service"
    restarts, before = prop(host, server, "NRestarts"), incidents(host)
    said = set()

    def up():
        said.add(json.loads(host.file(f"{INCIDENTS}/watch-state.json").content_string)["said"])
        return healthy(host) and prop(host, server, "ActiveState") == "active"

    host.check_output(f"echo 30 > {FAULT_DIR}/load-slow")
    try:
        host.check_output(f"systemctl restart --no-block {server}")
        wait_for(lambda: not healthy(host), "the restart to begin")
        wait_for(up, "the slow load's end", timeout_s=180)
    finally:
        host.run(f"rm -f {FAULT_DIR}/load-slow")
    loaded_s = monotonic_s(host) - int(prop(host, server, "ExecMainStartTimestampMonotonic")) / 1e6
    # the stand-in's phases share the 30 s (their sum a little under it): the load outlasted the stall
    # time by more than one of the watch's 5-second polls
    assert loaded_s > STALL_S + 5
    assert "not answering (loading or stopped)" in said
    assert prop(host, server, "NRestarts") == restarts and incidents(host) == before


def test_an_engine_stopped_under_load_is_restarted_with_every_processs_evidence(host):
    server = f"{UNIT}.service"
    old_pid, old_invocation = int(prop(host, server, "MainPID")), prop(host, server, "InvocationID")
    engine = engine_pid(host)
    send_requests(host)
    host.check_output(f"kill -STOP {engine}")
    # The bound: within two minutes a healthy service on a new main process.
    wait_for(lambda: prop(host, server, "InvocationID") != old_invocation and healthy(host),
             "a healthy restart of the stalled server", timeout_s=120)
    assert int(prop(host, server, "MainPID")) != old_pid
    # The watch writes the incident before the restart and its outcome once it saw the new start
    # answer (polling each second, as this test does): wait for that second write.
    wait_for(lambda: [i["action"].get("ok") for i in incidents(host)] == [True], "the restart's outcome recorded",
             timeout_s=30)

    (incident,) = incidents(host)
    assert incident["verdict"].startswith(
        f"the engine (VLLM::EngineCore, pid {engine}) is stopped (State T (stopped), wait channel do_signal_stop) in ")
    assert incident["stall"]["stalled_s"] >= STALL_S and incident["stall"]["reading"]["busy"] > 0
    # the server's NCCL settings, as inventory/sandbox gives them
    assert incident["nccl_environment"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "16"}
    by_role = {(p["role"], p["rank"]): p for p in incident["processes"]}
    assert set(by_role) == {("API server", None), ("engine", None), ("worker", 0), ("worker", 1)}
    assert by_role[("API server", None)]["pid"] == old_pid
    for p in by_role.values():
        assert p["threads"] and all(t["state"] for t in p["threads"]), p["name"]
        # a Python stack of every thread, read with the watch's own ptrace capability (the stopped
        # engine's without attaching)
        assert p["py_spy"] and all(t["frames"] for t in p["py_spy"]), (p["name"], p["py_spy_error"])
    assert incident["action"]["taken"] == "restart" and incident["action"]["ok"] is True
    assert incident["action"]["old_main_pid"] == old_pid
    assert incident["action"]["main_pid"] == int(prop(host, server, "MainPID"))
    path = f"{INCIDENTS}/{incident['time']}"
    assert "Thread" in host.file(f"{path}/py-spy-{old_pid}.txt").content_string
    assert "vllm:num_requests_running" in host.file(f"{path}/metrics.txt").content_string
    journal = host.file(f"{path}/journal.txt").content_string  # read by the watch's journal group
    assert "Application startup complete." in journal and "GET /metrics" not in journal
    journal = host.check_output(f"journalctl -u {WATCH} --no-pager")
    assert f"restarting {server}: SIGKILL to its 3 other process(es), then to its main process {old_pid}" in journal
    # under load the watch read the GPUs' PCIe links (the nvidia-smi stand-in: two GPUs at x16 of x16) and
    # its figures for Prometheus count the stall
    figures = host.file("/var/lib/vllm-ops/metrics/vllm_ops_watch.prom").content_string
    for gpu, bus in ((0, "00000000:18:00.0"), (1, "00000000:2A:00.0")):
        labels = f'unit="{server}",bus_id="{bus}",gpu="{gpu}"'
        assert f"vllm_ops_watch_pcie_link_width{{{labels}}} 16" in figures, figures
        assert f"vllm_ops_watch_pcie_link_width_max{{{labels}}} 16" in figures
    assert f'vllm_ops_watch_stalls_total{{unit="{server}"}} 1' in figures
    assert f'vllm_ops_watch_last_incident_timestamp_seconds{{unit="{server}"}}' in figures


def test_past_the_restart_limit_the_watch_restarts_nothing_and_says_why(host):
    # One restart in the window already (the test above), and a limit of one.
    play = run_playbook("playbooks/deploy.yml", "-e", "vllm_watch_max_restarts=1")
    assert play.rc == 0, play.output[-3000:]
    server = f"{UNIT}.service"
    pid = prop(host, server, "MainPID")
    engine = engine_pid(host)
    send_requests(host)
    host.check_output(f"kill -STOP {engine}")
    try:
        wait_for(lambda: prop(host, WATCH, "ActiveState") == "failed", "the watch to give up", timeout_s=120)
        assert prop(host, WATCH, "ExecMainStatus") == "3"
        assert prop(host, server, "MainPID") == pid, "restarted past the limit"
        last = incidents(host)[-1]
        assert last["action"] == {"taken": "none",
                                  "why": "1 restart(s) in the last 3600 s already: the watch gives up"}
        journal = host.check_output(f"journalctl -u {WATCH} --no-pager")
        assert "gave up: stalled again after 1 restart(s) in 3600 s" in journal
    finally:
        host.run(f"kill -CONT {engine}")
    # The scenario's own settings again: the watch runs, the server was never touched.
    play = run_playbook("playbooks/deploy.yml")
    assert play.rc == 0, play.output[-3000:]
    assert host.service(WATCH).is_running and prop(host, server, "MainPID") == pid


def test_the_incidents_are_fetched_once_and_read_with_check_mode_writing_nothing(host, tmp_path):
    """playbooks/incidents.yml over the two incidents above: --check names them and writes nothing;
    a run fetches them whole and reports each; a second run fetches nothing."""
    on_host = incidents(host)
    names = [i["time"] for i in on_host]
    extra = ("-e", json.dumps({"vllm_watch_artifacts_dir": str(tmp_path)}))
    check = run_playbook("playbooks/incidents.yml", "--check", *extra)
    assert check.rc == 0, check.output[-3000:]
    said = check.result("Say what --check would fetch")["msg"]
    assert said.startswith(f"would fetch 2 incident(s) into {tmp_path}/") and said.endswith(", ".join(names))
    assert not list(tmp_path.glob("*/incidents/*/incident.json")) and not (tmp_path / "incidents.md").exists()

    play = run_playbook("playbooks/incidents.yml", *extra)
    assert play.rc == 0, play.output[-3000:]
    fetched = sorted(tmp_path.glob("*/incidents/*/incident.json"))
    assert [json.loads(p.read_text()) for p in fetched] == on_host
    restarted, gave_up = on_host
    first = fetched[0].parent
    assert {p.name for p in first.iterdir()} == {  # the sandbox has an nvidia-smi (the stand-in's)
        "incident.json", "metrics.txt", "journal.txt", "nvidia-smi.txt",
        *(f"py-spy-{p['pid']}.txt" for p in restarted["processes"])}
    assert (first.parent / "watch-state.json").is_file()
    # the restart's load, recorded by the watch from the new start's journal, the stand-in's phases in it
    load = restarted["action"]["load"]
    assert load["ready"] and load["invocation_id"] == restarted["action"]["invocation_id"]
    report = (tmp_path / "incidents.md").read_text()
    assert f"- **Verdict**: {restarted['verdict']}" in report and f"- **Verdict**: {gave_up['verdict']}" in report
    assert (f"- **The watch**: restarted: main PID {restarted['action']['old_main_pid']} -> "
            f"{restarted['action']['main_pid']}") in report
    assert "- **The restart's load**: ready in " in report
    lines = play.result("Show the incidents")["msg"]
    assert lines[-1].startswith("2 incident(s) on 1 of 1 host(s): 1 restarted, 1 recorded only; newest ")

    again = run_playbook("playbooks/incidents.yml", *extra)
    assert again.rc == 0 and again.changed == 0, again.changed_tasks
    assert again.result("Tell which are not on the controller yet")["stdout"] == "[]"
