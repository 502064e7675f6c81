"""The watch's slowdown, through the operators' Prometheus (issue 34's acceptance test): on the sandbox
host, Debian's node_exporter serves the watch's figures from its textfile directory and Debian's
Prometheus scrapes it every 5 s and evaluates prometheus/vllm-ops.rules.yml as shipped (prepare.yml,
sandbox_prometheus). The stand-in's step grows with its batch (VLLM_STANDIN_BATCH_COST 0.25, host_vars),
as a batched engine's does; the watch judges 5-second intervals against a baseline of 10 (host_vars).

The service armed (its profiler on, fenced to loopback) and the watch's automatic capture on. A baseline
learned from one then two users; twice the users: every token slower, and nothing fires; the same users
with every step 30% slower (the stand-in's steps-slower switch, same process): VllmSlowdown fires within
five minutes, the watch's slowdown incident holds a live capture of that traffic, the service is never
restarted, and playbooks/incidents.yml reports the capture's verdict beside the slowdown's figures."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import (
    FAULT_DIR,
    INCIDENTS,
    UNIT,
    in_flight,
    incident_names,
    read_incident,
    run_playbook,
    start_traffic,
    stop_traffic,
    wait_for,
)

WATCH = "vllm-ops-watch"
SERVED = "kimi-k2.5"  # inventory/sandbox
BASELINE_INTERVALS = 10  # host_vars
SLOWER = 1.3


def prop(host, unit, name):
    return host.check_output(f"systemctl show {unit} -p {name} --value")


def prometheus(host, path, **params):
    """The sandbox Prometheus's HTTP API (on the host's loopback): the answer's ``data``."""
    args = " ".join(f"--data-urlencode {shlex.quote(f'{key}={value}')}" for key, value in params.items())
    answer = json.loads(host.check_output(f"curl -sfG {args} http://127.0.0.1:9090/api/v1/{path}"))
    assert answer["status"] == "success", answer
    return answer["data"]


def slowdown_alerts(host):
    return [a for a in prometheus(host, "alerts")["alerts"] if a["labels"]["alertname"] == "VllmSlowdown"]


def step_state(host):
    return json.loads(host.file(f"{INCIDENTS}/watch-state.json").content_string)["step"]


def judged(host, count, batch_at_least, timeout_s=120):
    """The next ``count`` intervals the watch judges (or learns from) at a batch of at least
    ``batch_at_least``, each as the watch's state gives it."""
    seen = {}

    def enough():
        latest = step_state(host)["latest"] or {}
        if latest.get("batch", 0) >= batch_at_least:
            seen[latest["steps"], latest["step_ms"]] = latest
        return len(seen) >= count

    wait_for(enough, f"{count} intervals at a batch of {batch_at_least} or more", timeout_s=timeout_s)
    return list(seen.values())[:count]


# The profiler armed and the watch capturing (its minimum interval after a job short: the deploy itself is one).
ARMED = ("-e", "vllm_profiler_armed=true", "-e", "vllm_watch_auto_capture=true",
         "-e", "vllm_watch_capture_min_interval_s=30")


@pytest.fixture
def armed(host):
    play = run_playbook("playbooks/deploy.yml", *ARMED)
    assert play.rc == 0, play.output[-3000:]
    yield
    stop_traffic(host)
    host.run(f"rm -f {FAULT_DIR}/steps-slower")
    play = run_playbook("playbooks/deploy.yml")  # the scenario's service again, unarmed
    assert play.rc == 0, play.output[-3000:]


def test_a_slower_service_fires_the_slowdown_alert_and_is_captured_where_twice_the_load_fires_nothing(
        host, armed, tmp_path):
    server = f"{UNIT}.service"
    main_pid, restarts, before = prop(host, server, "MainPID"), prop(host, server, "NRestarts"), incident_names(host)
    # the chain: the watch's file, linked into node_exporter's textfile directory, scraped by Prometheus
    wait_for(lambda: prometheus(host, "query", query="vllm_ops_watch_updated_timestamp_seconds")["result"],
             "Prometheus reading the watch's figures through node_exporter")
    (rule,) = [r for g in prometheus(host, "rules")["groups"] for r in g["rules"] if r["name"] == "VllmSlowdown"]
    assert rule["duration"] == 120 and rule["health"] == "ok"  # the shipped rule, as operators load it

    # A baseline learned afresh (the operator's way: its file removed, the watch restarted) once the earlier
    # tests' requests are done: one user, then two, so the window spans two batches.
    wait_for(lambda: in_flight(host) == 0, "the earlier tests' requests done", timeout_s=180)
    host.check_output(f"systemctl stop {WATCH} && rm -f {INCIDENTS}/baseline.json && systemctl start {WATCH}")
    start_traffic(host, SERVED, senders=1)
    wait_for(lambda: step_state(host)["learning"] >= BASELINE_INTERVALS // 2, "half the baseline's window")
    start_traffic(host, SERVED, senders=1)
    wait_for(lambda: step_state(host)["baseline"], "the baseline fitted", timeout_s=120)
    baseline = step_state(host)["baseline"]
    assert baseline["intervals"] == BASELINE_INTERVALS and baseline["batch"][0] < 1.5 < baseline["batch"][1] < 2.5
    two = judged(host, 2, 1.8)

    # Twice the users: each token costs more (a quarter of a step per further sequence: a batch of four
    # takes 1.75 steps' time, against 1.25 for two), yet at its batch no more than the baseline says.
    start_traffic(host, SERVED, senders=2)
    four = judged(host, 3, 3.5)
    assert min(i["step_ms"] for i in four) > 1.3 * max(i["step_ms"] for i in two)
    for interval in four:
        assert abs(interval["residual"]) < interval["band"], interval
    assert slowdown_alerts(host) == []  # neither pending nor firing

    # The same four users, every step 30% slower: the residual above the band, the alert firing once it
    # held two minutes, within the five the issue allows.
    host.check_output(f"echo {SLOWER} > {FAULT_DIR}/steps-slower")
    slowed = time.monotonic()
    wait_for(lambda: [a for a in slowdown_alerts(host) if a["state"] == "firing"], "VllmSlowdown firing",
             timeout_s=300)
    assert time.monotonic() - slowed < 300
    (alert,) = slowdown_alerts(host)
    assert alert["labels"]["unit"] == server and alert["labels"]["severity"] == "warning"
    assert float(alert["value"]) == pytest.approx(SLOWER - 1, abs=0.08)
    latest = step_state(host)["latest"]
    assert latest["residual"] > latest["band"] and latest["batch"] > 3.5
    # explained without a restart: the watch's incident, its capture of the traffic as it ran, the same process
    wait_for(lambda: len(incident_names(host) - before) == 1 and read_incident(
        host, max(incident_names(host) - before))["action"] is not None, "the slowdown's incident", timeout_s=120)
    (name,) = incident_names(host) - before
    incident = read_incident(host, name)
    assert incident["kind"] == "slowdown" and incident["verdict"].startswith("decode steps +")
    assert incident["action"] == {"taken": "capture", "ok": True}, incident["action"]
    assert [t["rank"] for t in incident["capture"]["traces"]] == [0, 1]
    assert incident["slowdown"]["changes"] == []  # nothing on the host changed since the baseline
    assert prop(host, server, "MainPID") == main_pid and prop(host, server, "NRestarts") == restarts

    # the incidents fetched: the report gives the capture's verdict (the stand-in's traces are real ones
    # of a TP2 decode on H200, host-bound on rank 1) beside the slowdown's figures and its baseline
    play = run_playbook("playbooks/incidents.yml", "-e", json.dumps({"vllm_watch_artifacts_dir": str(tmp_path)}))
    assert play.rc == 0, play.output[-3000:]
    (fetched,) = tmp_path.glob(f"*/incidents/{name}")
    assert {t["file"] for t in incident["capture"]["traces"]} <= {p.name for p in (fetched / "capture").iterdir()}
    report = (tmp_path / "incidents.md").read_text()
    assert f"- **Verdict**: {incident['verdict']}" in report
    assert "- **The capture's verdict**: host-bound on rank 1" in report
    assert "- **What changed on the host since the baseline**: nothing the watch reads changed" in report
