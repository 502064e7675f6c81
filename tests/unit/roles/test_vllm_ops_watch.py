"""roles/vllm/files/vllm_ops_watch.py without a host: the stall rule on recorded /metrics sequences,
the verdict from recorded process evidence, the restart budget, the incidents' pruning, and one poll's
decision (record, restart, give up) with the host's calls replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_ops.records import IncidentRecord

from watch_installed import watch as w  # as the role installs it, its module_utils beside it

DEFAULTS = w.watch_config.defaults()  # every setting of the watch at its default (watch_config.py)

EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="kimi-k2.5"} 3.0
vllm:num_requests_waiting{engine="0",model_name="kimi-k2.5"} 1.0
vllm:generation_tokens_total{engine="0",model_name="kimi-k2.5"} 4046.0
vllm:iteration_tokens_total_count{engine="0",model_name="kimi-k2.5"} 170.0
vllm:iteration_tokens_total_count{engine="1",model_name="kimi-k2.5"} 30.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="kimi-k2.5"} 170.0
vllm:cache_config_info{block_size="16",engine="0"} 1.0
"""


def r(steps, tokens, busy):
    return {"steps": steps, "tokens": tokens, "busy": busy}


def test_the_exposition_is_read_summed_over_engines():
    samples = w.parse_metrics(EXPOSITION)
    assert samples["vllm:iteration_tokens_total_count"] == 200.0  # 170 + 30, two engines
    assert w.reading(samples) == r(200.0, 4046.0, 4.0)  # 3 running + 1 waiting
    assert w.reading({}) == r(None, None, 0.0)


def run(rule, seq, identity="a"):
    """Feed (t, reading) pairs; the stalled seconds returned at each."""
    return [rule.observe(t, identity, value) for t, value in seq]


def test_requests_in_flight_and_counters_frozen_is_a_stall_after_stall_s():
    rule = w.Liveness(stall_s=20)
    # steps advance until t=10, then freeze with 3 requests in flight; polled every 5 s
    seq = [(0, r(1, 10, 3)), (5, r(2, 20, 3)), (10, r(3, 30, 3))] + [(t, r(3, 30, 3)) for t in range(15, 45, 5)]
    out = run(rule, seq)
    # frozen since the advance at t=10: 5, 10, 15 s are not yet 20; at t=30 it is 20 s
    assert out == [0, 0, 0, 0, 0, 0, 20, 25, 30]


def test_idle_is_never_stalled_however_long():
    rule = w.Liveness(stall_s=20)
    assert set(run(rule, [(t, r(50, 900, 0)) for t in range(0, 3600, 5)])) == {0}


def test_either_counter_advancing_is_progress():
    # the step counter missing (another release) or frozen while tokens advance: not stalled
    rule = w.Liveness(stall_s=20)
    assert set(run(rule, [(t, r(None, t, 2)) for t in range(0, 300, 5)])) == {0}
    rule = w.Liveness(stall_s=20)
    assert set(run(rule, [(t, r(7, t, 2)) for t in range(0, 300, 5)])) == {0}


def test_without_a_progress_counter_nothing_is_judged_a_stall():
    rule = w.Liveness(stall_s=20)
    assert set(run(rule, [(t, r(None, None, 3)) for t in range(0, 300, 5)])) == {0}


def test_a_slow_saturated_engine_is_not_stalled_and_sets_the_derived_stall_time():
    rule = w.Liveness(stall_s=0, floor_s=120)
    assert rule.stall_s == 120
    # busy throughout, one advance every 60 s, polled every 5 s: never stalled, and the derived
    # stall time becomes 10 x the 60-second gap
    seq = [(t, r(t // 60, t // 60, 8)) for t in range(0, 1200, 5)]
    assert set(run(rule, seq)) == {0}
    assert rule.longest_gap_s == 60 and rule.stall_s == 600


def test_a_gap_while_idle_does_not_count_toward_the_derived_stall_time():
    rule = w.Liveness(stall_s=0, floor_s=120)
    # idle from 0 to 500, busy from 505: the gap counted is 505 -> 515's advance, 10 s
    run(rule, [(0, r(1, 1, 0)), (500, r(1, 1, 0)), (505, r(2, 2, 1)), (510, r(2, 2, 1)), (515, r(3, 3, 1))])
    assert rule.longest_gap_s == 10 and rule.stall_s == 120


def test_a_load_or_a_new_start_begins_the_count_again():
    rule = w.Liveness(stall_s=20)
    assert run(rule, [(0, r(1, 1, 2)), (15, r(1, 1, 2))]) == [0, 0]
    # /metrics refused (a restart's load) at 20, back at 25 with requests already queued
    assert run(rule, [(20, None), (25, r(0, 0, 2)), (40, r(0, 0, 2)), (45, r(0, 0, 2))]) == [0, 0, 0, 20]
    # a new InvocationID with the counters frozen: its own count, from its first reading
    assert run(rule, [(50, r(0, 0, 2)), (65, r(0, 0, 2)), (70, r(0, 0, 2))], identity="b") == [0, 0, 20]


def test_the_restart_budget_counts_a_sliding_window():
    budget = w.RestartBudget(2, 3600, past=[0])
    assert budget.allows(10)
    budget.spend(10)
    assert not budget.allows(3599)  # 0 and 10 in the window
    assert budget.allows(3600)  # 0 left it
    assert not w.RestartBudget(0, 60).allows(0)


PY_SPY = """\
Process 812: VLLM::Worker_TP1
Python v3.11.2 (/usr/bin/python3.11)

Thread 812 (active+gil): "MainThread"
    all_reduce (vllm/distributed/device_communicators/pynccl.py:142)
    forward (vllm/model_executor/layers/linear.py:1311)
    execute_model (vllm/v1/worker/gpu_worker.py:530)
Thread 840 (idle): "Thread-1"
    wait (threading.py:327)
"""


def test_py_spy_dump_is_read_thread_by_thread_innermost_first():
    threads = w.py_spy_frames(PY_SPY)
    assert [(t["thread"], t["idle"], len(t["frames"])) for t in threads] == [
        ("MainThread", False, 3), ("Thread-1", True, 1)]
    assert threads[0]["frames"][0] == "all_reduce (vllm/distributed/device_communicators/pynccl.py:142)"


def proc(pid, name, role, rank=None, state="S (sleeping)", wchan="do_select", py_spy=None, error=None):
    return {"pid": pid, "name": name, "role": role, "rank": rank, "state": state, "wchan": wchan,
            "py_spy": py_spy, "py_spy_error": error}


def frames(*names):
    return [{"thread": "MainThread", "idle": False, "frames": list(names)}]


def test_the_verdict_names_a_stopped_engine_first():
    ps = [proc(10, "vllm", "API server", py_spy=frames("select (selectors.py:468)")),
          proc(11, "VLLM::EngineCore", "engine", state="T (stopped)", wchan="do_signal_stop",
               error="Failed to find python version"),
          proc(12, "VLLM::Worker_TP0", "worker", 0, py_spy=frames("acquire_read (shm_broadcast.py:512)"))]
    assert w.verdict(ps) == ("the engine (VLLM::EngineCore, pid 11) is stopped (State T (stopped), wait channel "
                             "do_signal_stop); py-spy: Failed to find python version")
    ps[1].update(py_spy=frames("run_busy_loop (core.py:812)"), py_spy_error=None)
    assert w.verdict(ps) == ("the engine (VLLM::EngineCore, pid 11) is stopped (State T (stopped), wait channel "
                             "do_signal_stop) in run_busy_loop (core.py:812)")


def test_the_verdict_names_the_workers_inside_a_collective():
    engine = frames("acquire_read (shm_broadcast.py:512)", "step (core.py:1)")
    ps = [proc(11, "VLLM::EngineCore", "engine", py_spy=engine),
          proc(12, "VLLM::Worker_TP0", "worker", 0, py_spy=frames("all_reduce (pynccl.py:142)", "forward (x.py:1)")),
          proc(13, "VLLM::Worker_TP1", "worker", 1, py_spy=frames("execute_model (gpu_worker.py:530)")),
          proc(14, "VLLM::Worker_TP2", "worker", 2, py_spy=frames("all_reduce (pynccl.py:142)"))]
    assert w.verdict(ps) == ("worker rank 0 (VLLM::Worker_TP0, pid 12) is inside a collective: all_reduce "
                             "(pynccl.py:142); ranks 2 too")


def test_the_verdict_falls_back_to_the_engines_frame():
    ps = [proc(11, "VLLM::EngineCore", "engine", py_spy=frames("schedule (scheduler.py:300)", "step (core.py:1)"))]
    assert w.verdict(ps) == "the engine (VLLM::EngineCore, pid 11) is stuck in schedule (scheduler.py:300)"
    ps = [proc(11, "VLLM::EngineCore", "engine", error="Permission denied")]
    assert w.verdict(ps) == ("the engine (VLLM::EngineCore, pid 11) made no progress; no Python stack: "
                             "Permission denied")
    assert w.verdict([]) == "no engine process found in the unit's cgroup"


def test_roles_are_told_by_the_main_pid_and_the_process_names():
    assert w.role_of("python3", 10, 10) == ("API server", None)
    assert w.role_of("VLLM::EngineCore", 10, 11) == ("engine", None)
    assert w.role_of("VLLM::EngineCor", 10, 11) == ("engine", None)  # the kernel's comm, cut at 15
    assert w.role_of("VLLM::Worker_TP7", 10, 12) == ("worker", 7)
    assert w.role_of("VLLM::Worker", 10, 12) == ("worker", 0)
    assert w.role_of("bash", 10, 13) == ("other", None)


def make_incident(root, name, size):
    d = root / name
    d.mkdir()
    (d / "incident.json").write_text("{}")
    (d / "journal.txt").write_text("x" * size)


def test_the_oldest_incidents_go_past_the_count_or_the_bytes(tmp_path):
    for i, size in enumerate([100, 100, 100, 100]):
        make_incident(tmp_path, f"20261204T10000{i}Z", size)
    (tmp_path / "watch-state.json").write_text("{}")
    assert w.prune(str(tmp_path), keep=3, max_bytes=10_000) == ["20261204T100000Z"]
    # each is 102 bytes (its two files): three are 306 > 250, two are 204
    assert w.prune(str(tmp_path), keep=3, max_bytes=250) == ["20261204T100001Z"]
    assert w.prune(str(tmp_path), keep=3, max_bytes=150) == ["20261204T100002Z"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20261204T100003Z", "watch-state.json"]


def test_the_nccl_settings_are_read_from_the_environment_files_the_variants_last(tmp_path):
    unit, variant = tmp_path / "unit.env", tmp_path / "variant.env"
    unit.write_text('# Environment\nNCCL_ALGO="Ring"\nNCCL_PROTO="LL"\nVLLM_X="1"\n')
    variant.write_text('NCCL_PROTO="LL128"\n')
    assert w.nccl_environment([str(unit), str(variant), str(tmp_path / "missing.env")]) == {
        "NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}


def test_the_journal_tail_leaves_out_the_polls(monkeypatch):
    log = ["2026-12-04T18:00:00 h vllm[1]: (APIServer pid=1) INFO Starting vLLM server on http://0.0.0.0:8000"]
    log += [f'2026-12-04T18:00:{i:02d} h vllm[1]: INFO:     127.0.0.1:{4000 + i} - "GET /metrics HTTP/1.1" 200 OK'
            for i in range(50)]
    log += ['2026-12-04T18:01:00 h vllm[1]: INFO:     10.0.0.9:5000 - "POST /v1/completions HTTP/1.1" 200 OK']
    seen = []
    monkeypatch.setattr(w, "_command", lambda argv, timeout_s=30: seen.append(argv) or "\n".join(log))
    assert w.journal_tail("v.service", 5).splitlines() == [log[0], log[-1]]
    assert seen[0][:4] == ["journalctl", "--all", "-u", "v.service"] and seen[0][5] == "100"


class Host:
    """The host's side of one poll: the unit's properties, /metrics, the lock; kill and restart faked."""

    def __init__(self, monkeypatch, tmp_path, busy=2):
        self.props = {"MainPID": "100", "InvocationID": "inv1", "ControlGroup": "/system.slice/v.service",
                      "ActiveState": "active"}
        self.metrics = f'vllm:num_requests_running{{engine="0"}} {busy}\nvllm:iteration_tokens_total_count 5\n'
        self.killed = []
        monkeypatch.setattr(w, "unit_props", lambda unit: dict(self.props))
        monkeypatch.setattr(w, "fetch", lambda url, timeout: (200, self.metrics if url.endswith("/metrics") else ""))
        monkeypatch.setattr(w, "cgroup_pids", lambda cg: [])
        monkeypatch.setattr(w, "_command", lambda argv, timeout_s=30: "")
        monkeypatch.setattr(w.os, "kill", lambda pid, sig: self.killed.append((pid, sig)))
        monkeypatch.setattr(w, "notify", lambda text: None)

        def restarted(cfg, old, deadline):
            # what the incident says while the restart is waited for
            self.during = [json.loads(p.read_text())["action"] for p in sorted(self.dir.glob("*/incident.json"))]
            self.props.update(MainPID="200", InvocationID=f"{old}-new")
            return dict(self.props), w.time.monotonic() + 3.0

        monkeypatch.setattr(w, "wait_restarted", restarted)
        self.cfg = {**DEFAULTS, "stall_s": 20, "max_restarts": 1, "incidents_dir": str(tmp_path / "incidents"),
                    "lock_file": str(tmp_path / "job.lock"), "metrics_file": str(tmp_path / "vllm_ops_watch.prom"),
                    "nvidia_smi": ""}
        (tmp_path / "incidents").mkdir()
        self.dir = tmp_path / "incidents"

    def incidents(self):
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob("*/incident.json"))]


def polls(watch, monkeypatch, times):
    codes = []
    for t in times:  # the same seconds on both clocks
        monkeypatch.setattr(w.time, "time", lambda t=t: t)
        monkeypatch.setattr(w.time, "monotonic", lambda t=t: t)
        codes.append(watch.poll())
    return codes


def test_a_stall_is_recorded_then_restarted_and_a_second_one_past_the_budget_gives_up(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path)
    watch = w.Watch(host.cfg)
    assert polls(watch, monkeypatch, [1000, 1010, 1019]) == [None] * 3 and host.killed == []
    assert polls(watch, monkeypatch, [1020]) == [None]
    assert host.killed == [(100, w.signal.SIGKILL)]
    # on disk before the restart, its outcome still open
    assert host.during == [{"taken": "restart", "ok": None, "old_main_pid": 100}]
    (first,) = host.incidents()
    load = first["action"].pop("load")
    assert first["action"] == {"taken": "restart", "ok": True, "old_main_pid": 100, "main_pid": 200,
                               "invocation_id": "inv1-new", "seconds_to_healthy": 3.0}
    assert (load["invocation_id"], load["ready"]) == ("inv1-new", False)  # its journal (faked) is empty
    assert first["stall"]["stalled_s"] == 20 and first["verdict"] == "no engine process found in the unit's cgroup"
    # The new start stalls too: one restart in the window (max 1), so the watch gives up.
    assert polls(watch, monkeypatch, [1030, 1045, 1050]) == [None, None, w.EXIT_GAVE_UP]
    assert len(host.killed) == 1
    second = host.incidents()[-1]
    assert second["action"]["taken"] == "none" and "the watch gives up" in second["action"]["why"]
    state = json.loads((host.dir / "watch-state.json").read_text())
    assert state["said"].startswith("gave up: stalled again after 1 restart(s) in 3600 s")
    # What the watch wrote on the host is what the controller reads, through the record's module.
    records = [IncidentRecord.load(p) for p in sorted(host.dir.glob("*/incident.json"))]
    assert [r.finished() for r in records] == [True, True] and records[0].to_dict()["schema"] == "vllm-ops/incident/2"


def test_a_restart_kills_every_process_of_the_server_main_last_and_never_pid_0(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path)
    monkeypatch.setattr(w, "cgroup_pids", lambda cg: [101, 100, 102])
    watch = w.Watch(host.cfg)
    monkeypatch.setattr(w, "_alive", lambda pid: False)
    action = watch.restart({"MainPID": "100", "InvocationID": "inv1", "ControlGroup": "/x"})
    assert host.killed == [(101, w.signal.SIGKILL), (102, w.signal.SIGKILL), (100, w.signal.SIGKILL)]
    assert action["ok"] is True and action["main_pid"] == 200
    host.killed.clear()
    action = watch.restart({"MainPID": "0", "InvocationID": "inv2", "ControlGroup": "/x"})
    assert host.killed == [] and action == {"taken": "restart", "ok": False,
                                            "why": "the server has no main process to end"}


def journal_json(t0, lines):
    """``journalctl -o json`` of one start: (seconds after the unit's start, message) each."""
    return "\n".join(json.dumps({"MESSAGE": m, "__MONOTONIC_TIMESTAMP": str(round((t0 + t) * 1e6)),
                                 "__REALTIME_TIMESTAMP": str(round((1.7e9 + t0 + t) * 1e6))}) for t, m in lines)


def test_the_restarts_load_is_recorded_with_its_phases_from_the_new_starts_journal(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path)
    t0 = 5000.0  # the new start's ExecMainStartTimestampMonotonic, in seconds
    asked = []

    def command(argv, timeout_s=30):
        asked.append(argv)
        return journal_json(t0, [(2.0, "Starting to load model /models/k ..."),
                                 (9.5, "Loading weights took 7.10 seconds"),
                                 (12.0, "INFO:     Application startup complete.")]) if argv[0] == "journalctl" else ""

    monkeypatch.setattr(w, "_command", command)
    props = {"MainPID": "200", "InvocationID": "inv2", "ExecMainStartTimestampMonotonic": str(int(t0 * 1e6))}
    load = w.restart_load(host.cfg, props, healthy_at=t0 + 13.0)
    assert asked[-1][-1] == "_SYSTEMD_INVOCATION_ID=inv2" and "-u" in asked[-1]
    # the phases by hand: start 0 -> 2.0, weights 2.0 -> 9.5, the API's start 9.5 -> 12.0 (the rest not logged)
    assert load["ready"] and load["total_s"] == 12.0 and load["healthy_s"] == 13.0
    measured = {p["name"]: p["seconds"] for p in load["phases"] if p["status"] == "measured"}
    assert measured == {"start": 2.0, "weights": 7.5, "api_start": 2.5}
    assert w.restart_load(host.cfg, {"MainPID": "0", "InvocationID": ""}, None) == {
        "error": "the unit has no start to read"}


def test_a_stall_while_a_job_holds_the_lock_is_recorded_once_and_nothing_is_done(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path)
    (tmp_path / "job.lock").write_text(json.dumps({"kind": "campaign", "job_id": "20261204T1"}))
    watch = w.Watch(host.cfg)
    assert polls(watch, monkeypatch, [0, 20, 25, 30, 60]) == [None] * 5
    assert host.killed == []
    (only,) = host.incidents()
    why = f"campaign 20261204T1 holds the host's lock ({tmp_path}/job.lock)"
    assert only["action"] == {"taken": "none", "why": why}


def test_a_step_of_the_wall_clock_is_no_stall(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path)  # busy, counters frozen
    watch = w.Watch(host.cfg)
    for mono, wall in [(0, 1000), (5, 1005), (10, 9000)]:  # the wall clock jumps by two hours at 10 s
        monkeypatch.setattr(w.time, "time", lambda wall=wall: wall)
        monkeypatch.setattr(w.time, "monotonic", lambda mono=mono: mono)
        assert watch.poll() is None
    assert host.killed == [] and host.incidents() == []


def test_a_server_without_progress_counters_is_left_alone_and_the_status_says_why(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path)
    host.metrics = 'vllm:num_requests_running{engine="0"} 4\n'
    watch = w.Watch(host.cfg)
    assert polls(watch, monkeypatch, range(0, 100, 5)) == [None] * 20 and host.killed == []
    said = json.loads((host.dir / "watch-state.json").read_text())["said"]
    assert said == ("no vllm:iteration_tokens_total_count or vllm:generation_tokens_total in /metrics: "
                    "nothing to judge progress by")


def test_an_idle_service_is_left_alone(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path, busy=0)
    watch = w.Watch(host.cfg)
    assert polls(watch, monkeypatch, range(0, 600, 5)) == [None] * 120
    assert host.killed == [] and host.incidents() == []
    assert json.loads((host.dir / "watch-state.json").read_text())["said"] == "idle"


def test_a_poll_that_fails_is_logged_and_the_watch_goes_on(monkeypatch, tmp_path, capsys):
    config = tmp_path / "watch.json"
    config.write_text(json.dumps({"incidents_dir": str(tmp_path / "incidents"), "interval_s": 0}))
    calls = []

    def poll(self):
        calls.append(1)
        if len(calls) == 1:
            raise FileNotFoundError("/proc/123/task")
        return w.EXIT_GAVE_UP

    monkeypatch.setattr(w.Watch, "poll", poll)
    monkeypatch.setattr(w, "notify", lambda text: None)
    assert w.main(["--config", str(config)]) == w.EXIT_GAVE_UP and len(calls) == 2
    out = capsys.readouterr().out
    assert "<3>a poll failed, the watch goes on: " in out and "FileNotFoundError: /proc/123/task" in out


def test_a_process_gone_since_the_cgroup_was_read_leaves_what_is_known(tmp_path):
    entry = w.process_evidence(2**22 + 7, 1, str(tmp_path / "no-py-spy"))  # no such pid
    assert entry["threads"] == [] and entry["state"] is None and entry["role"] == "other"


def test_a_thread_ended_since_the_listing_is_left_out(tmp_path, monkeypatch):
    """A server's worker threads come and go: one listed but gone before its status was read is no
    evidence (CI saw a thread with no state in the API server's list)."""
    gone = 2**22 + 9  # above the kernel's pid_max: no such thread
    listdir = os.listdir
    monkeypatch.setattr(w.os, "listdir", lambda path: [*listdir(path), str(gone)])
    entry = w.process_evidence(os.getpid(), 1, str(tmp_path / "no-py-spy"))
    live = sorted(int(t) for t in listdir(f"/proc/{os.getpid()}/task"))
    assert entry["threads"] and gone not in [t["tid"] for t in entry["threads"]]
    assert {t["tid"] for t in entry["threads"]} <= set(live) and all(t["state"] for t in entry["threads"])


HELD = """\
import time

def held_here():
    print("ready", flush=True)
    time.sleep(600)

held_here()
"""


def test_a_stopped_process_is_read_without_attaching_and_still_answers_signals():
    """py-spy (the controller's, as pinned) reads a SIGSTOPped Python's stack; the process is not left
    traced: SIGCONT and SIGTERM still end it, as systemd's stop will."""
    py_spy = Path(sys.executable).with_name("py-spy")
    child = w.subprocess.Popen([sys.executable, "-c", HELD], stdout=w.subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: Path(f"/proc/{child.pid}/status").read_text().count("State:\tT"))
        entry = w.process_evidence(child.pid, child.pid, str(py_spy))
        assert entry["state"].startswith("T"), entry
        assert entry["py_spy_error"] is None, entry
        assert [f.split(" ")[0] for f in entry["py_spy"][0]["frames"]] == ["held_here", "<module>"]
        assert "TracerPid:\t0" in Path(f"/proc/{child.pid}/status").read_text()
        os.kill(child.pid, signal.SIGCONT)
        child.terminate()
        assert child.wait(timeout=30) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def wait_until(predicate, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("text,holder", [("", None), ('{"kind": "tune", "job_id": "x"}', "tune x"), ("junk", "a job")])
def test_the_lock_holder_is_read_from_the_lock_file(tmp_path, text, holder):
    lock = tmp_path / "job.lock"
    if text:
        lock.write_text(text)
    assert w.lock_holder(str(lock)) == holder


def test_a_stale_lock_holds_nothing_by_the_locks_own_rules(tmp_path):
    lock = tmp_path / "job.lock"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    live = {"kind": "tune", "job_id": "x", "expires_epoch": 2000.0, "boot_id": boot}
    for doc, now, holder in [
        (live, 1999.0, "tune x"),  # within its time, this boot: held
        (live, 2000.0, None),  # expired (vllm_job_lock: expires_epoch <= now)
        ({**live, "boot_id": "another-boot"}, 1000.0, None),  # taken before the host's last boot
        ({"campaign_id": "c1", "expires_epoch": 2000.0}, 1000.0, "campaign c1"),  # an earlier release's
    ]:
        lock.write_text(json.dumps(doc))
        assert w.lock_holder(str(lock), now) == holder, (doc, now)


def test_a_stall_under_an_expired_lock_is_restarted(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path)
    (tmp_path / "job.lock").write_text(json.dumps({"kind": "campaign", "job_id": "old", "expires_epoch": 10}))
    watch = w.Watch(host.cfg)
    assert polls(watch, monkeypatch, [100, 110, 120]) == [None] * 3
    assert host.killed == [(100, w.signal.SIGKILL)]
    assert host.incidents()[-1]["action"]["taken"] == "restart"


# -- slowdowns: the step time at its load, exported for Prometheus ---------------------------------------

class Server:
    """/metrics of a server whose steps take ``8 + 0.25 * batch`` ms (times ``slower``), its counters advanced
    by ``advance(seconds)`` at the batch set; every generated token's inter-token latency is its step's."""

    def __init__(self):
        self.total = {"vllm:iteration_tokens_total_count": 0.0, "vllm:iteration_tokens_total_sum": 0.0,
                      "vllm:generation_tokens_total": 0.0, "vllm:inter_token_latency_seconds_sum": 0.0,
                      "vllm:inter_token_latency_seconds_count": 0.0}
        self.batch, self.slower = 16, 1.0

    def step_ms(self):
        return (8.0 + 0.25 * self.batch) * self.slower

    def advance(self, seconds):
        steps = seconds * 1000.0 / self.step_ms()
        for name, value in (("vllm:iteration_tokens_total_count", steps),
                            ("vllm:iteration_tokens_total_sum", steps * self.batch),
                            ("vllm:generation_tokens_total", steps * self.batch),
                            ("vllm:inter_token_latency_seconds_sum", steps * self.batch * self.step_ms() / 1000),
                            ("vllm:inter_token_latency_seconds_count", steps * self.batch)):
            self.total[name] += value

    def text(self):
        return "".join(f"{name} {value}\n" for name, value in self.total.items()) + (
            f"vllm:num_requests_running {self.batch}\nvllm:kv_cache_usage_perc {0.01 * self.batch}\n")


def exported(path):
    """The exposition's samples, name -> value (one unit), and every name's TYPE line."""
    samples, types = {}, {}
    for line in Path(path).read_text().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        elif line and not line.startswith("#"):
            name, value = line.split("{", 1)[0], float(line.rsplit(" ", 1)[1])
            samples[name] = value
    assert set(samples) == set(types)
    return samples


def serve(watch, host, server, monkeypatch, batches, start, slower=1.0):
    """One poll a minute at each batch in turn; the time after the last."""
    t = start
    for batch in batches:
        server.batch, server.slower = batch, slower
        server.advance(60.0)
        host.metrics = server.text()
        assert polls(watch, monkeypatch, [t]) == [None]
        t += 60
    return t


def test_the_watch_learns_a_baseline_then_tells_a_slowdown_from_a_load_change(monkeypatch, tmp_path):
    host, server = Host(monkeypatch, tmp_path), Server()
    host.cfg.update(baseline_intervals=10, stall_s=600)
    watch = w.Watch(host.cfg)
    host.metrics = server.text()
    t = serve(watch, host, server, monkeypatch, [], 1000)
    assert polls(watch, monkeypatch, [t]) == [None]
    # a known-good ten minutes, the batch from 4 to 28: the baseline is learned and kept
    t = serve(watch, host, server, monkeypatch, [4, 8, 12, 16, 20, 24, 28, 24, 20, 12], t + 60)
    kept = json.loads((host.dir / "baseline.json").read_text())["baseline"]
    assert kept["intervals"] == 10
    assert kept["a"] == pytest.approx(8.0) and kept["b"] == pytest.approx(0.25) and kept["band"] == 0.10
    figures = exported(tmp_path / "vllm_ops_watch.prom")
    assert figures["vllm_ops_watch_baseline_intervals"] == 10 and "vllm_ops_watch_step_residual" not in figures

    # twice the load at the same speed: the step time rose 33%, the residual did not
    t = serve(watch, host, server, monkeypatch, [32, 32], t)
    figures = exported(tmp_path / "vllm_ops_watch.prom")
    assert figures["vllm_ops_watch_step_seconds"] == pytest.approx((8 + 0.25 * 32) / 1000)
    assert figures["vllm_ops_watch_decode_batch"] == pytest.approx(32)
    assert figures["vllm_ops_watch_step_residual"] == pytest.approx(0.0, abs=1e-6)
    assert figures["vllm_ops_watch_step_band"] == 0.10

    # the same load, every step 30% longer: the residual says so, and the status line too
    said = []
    monkeypatch.setattr(w, "notify", said.append)
    serve(watch, host, server, monkeypatch, [16, 16], t, slower=1.3)
    figures = exported(tmp_path / "vllm_ops_watch.prom")
    assert figures["vllm_ops_watch_step_residual"] == pytest.approx(0.3)
    assert figures["vllm_ops_watch_step_expected_seconds"] == pytest.approx((8 + 0.25 * 16) / 1000)
    assert figures["vllm_ops_watch_stalls_total"] == 0 and figures["vllm_ops_watch_gave_up"] == 0
    assert said[-1].endswith("16 request(s) in flight, advancing; step 15.6 ms at batch 16.0, +30% against the "
                             "baseline (band 10%); stall after 600 s; 0 restart(s) in the window")

    # a new watch (the host rebooted) keeps the baseline learned before
    again = w.Watch(host.cfg)
    assert again.slowdown.baseline == kept


def test_every_figure_the_watch_exports_is_declared_and_typed(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path, busy=0)
    watch = w.Watch(host.cfg)
    polls(watch, monkeypatch, [1000])
    figures = exported(tmp_path / "vllm_ops_watch.prom")
    assert set(figures) <= set(w.EXPORTED)
    assert figures["vllm_ops_watch_updated_timestamp_seconds"] == 1000
    text = (tmp_path / "vllm_ops_watch.prom").read_text()
    assert 'vllm_ops_watch_stalls_total{unit="vllm.service"} 0' in text
    assert oct(os.stat(tmp_path / "vllm_ops_watch.prom").st_mode & 0o777) == "0o644"  # node_exporter reads it


def test_a_metrics_file_that_cannot_be_written_is_said_once_and_the_watch_goes_on(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path, busy=0)
    host.cfg["metrics_file"] = str(tmp_path / "missing" / "vllm_ops_watch.prom")
    said = []
    monkeypatch.setattr(w, "say", lambda text, level="info": said.append((level, text)))
    watch = w.Watch(host.cfg)
    assert polls(watch, monkeypatch, [1000, 1005, 1010]) == [None] * 3
    warnings = [text for level, text in said if level == "warning" and "figures for Prometheus" in text]
    assert len(warnings) == 1 and "the figures for Prometheus cannot be written" in warnings[0]


def test_a_server_without_the_latency_histograms_is_named_once_and_still_judged_by_its_pace(monkeypatch, tmp_path):
    host, server = Host(monkeypatch, tmp_path), Server()
    host.cfg.update(baseline_intervals=10, stall_s=600)
    said = []
    monkeypatch.setattr(w, "say", lambda text, level="info": said.append((level, text)))
    watch = w.Watch(host.cfg)

    def without_latency():
        return "".join(line + "\n" for line in server.text().splitlines() if "inter_token_latency" not in line)

    t = 1000
    for batch in [16, 4, 8, 12, 16, 20, 24, 28, 24, 20, 12, 16]:
        server.batch = batch
        server.advance(60.0)
        host.metrics = without_latency()
        assert polls(watch, monkeypatch, [t]) == [None]
        t += 60
    warnings = [text for level, text in said if level == "warning"]
    assert warnings == ["the server's /metrics lacks what the step time is read from: "
                        "vllm:inter_token_latency_seconds or vllm:time_per_output_token_seconds (the step time "
                        "falls back to the interval over its steps, judged only while requests run through a "
                        "whole interval)"]
    state = json.loads((host.dir / "watch-state.json").read_text())["step"]
    assert state["latest"]["step_source"] == "interval over steps"
    assert state["latest"]["step_ms"] == pytest.approx(8 + 0.25 * 16)
    assert state["baseline"]["intervals"] == 10 and state["missing"] == [warnings[0].split(": ", 1)[1]]


class Smi:
    """nvidia-smi for the link reading: each call answers the next of ``answers`` (text, or None: the tool
    fails), the calls kept."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    def __call__(self, argv, **kwargs):
        self.calls.append(argv)
        text = self.answers.pop(0)
        return subprocess.CompletedProcess(argv, 0 if text is not None else 9, text or "",
                                           "" if text is not None else "NVIDIA-SMI has failed")


def test_the_pcie_links_are_read_under_load_every_interval_and_exported_per_gpu(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path, busy=2)
    host.cfg.update(nvidia_smi="nvidia-smi", pcie_interval_s=300)
    watch = w.Watch(host.cfg)
    watch.links.runner = smi = Smi("0, 00000000:18:00.0, 16, 16\n1, 00000000:2A:00.0, 4, 16\n", None)
    said = []
    monkeypatch.setattr(w, "say", lambda text, level="info": said.append((level, text)))
    polls(watch, monkeypatch, [1000, 1005, 1299])  # one reading in the interval
    assert smi.calls == [["nvidia-smi", "--query-gpu=index,pci.bus_id,pcie.link.width.current,"
                          "pcie.link.width.max", "--format=csv,noheader,nounits"]]
    text = (tmp_path / "vllm_ops_watch.prom").read_text()
    assert 'vllm_ops_watch_pcie_link_width{unit="vllm.service",bus_id="00000000:2A:00.0",gpu="1"} 4' in text
    assert 'vllm_ops_watch_pcie_link_width_max{unit="vllm.service",bus_id="00000000:2A:00.0",gpu="1"} 16' in text
    assert 'vllm_ops_watch_pcie_link_width{unit="vllm.service",bus_id="00000000:18:00.0",gpu="0"} 16' in text
    polls(watch, monkeypatch, [1300])  # the next reading fails: said, and no stale widths exported
    assert len(smi.calls) == 2
    assert "vllm_ops_watch_pcie_link_width" not in (tmp_path / "vllm_ops_watch.prom").read_text()
    links = [text for level, text in said if level == "warning" and "PCIe" in text]
    assert links == ["the GPUs' PCIe links are not read: nvidia-smi --query-gpu=index,pci.bus_id,"
                     "pcie.link.width.current,pcie.link.width.max failed (exit 9): NVIDIA-SMI has failed"]


def test_an_idle_service_s_links_are_not_read(monkeypatch, tmp_path):
    host = Host(monkeypatch, tmp_path, busy=0)
    host.cfg.update(nvidia_smi="nvidia-smi")
    watch = w.Watch(host.cfg)
    watch.links.runner = smi = Smi()
    polls(watch, monkeypatch, [1000, 2000])
    assert smi.calls == []


def test_a_load_the_baseline_predicts_no_time_for_is_shown_not_judged(monkeypatch, tmp_path):
    host, server = Host(monkeypatch, tmp_path), Server()
    host.cfg.update(stall_s=600)
    # a baseline whose line runs below zero at small batches (fitted on large ones only)
    baseline = {"a": -20.0, "b": 1.0, "c": 0.0, "band": 0.1, "intervals": 30, "batch": [40, 60], "kv": None,
                "window": None}
    (host.dir / "baseline.json").write_text(json.dumps({"baseline": baseline}))
    said = []
    monkeypatch.setattr(w, "notify", said.append)
    watch = w.Watch(host.cfg)
    serve(watch, host, server, monkeypatch, [4, 4], 1000)
    figures = exported(tmp_path / "vllm_ops_watch.prom")
    assert "vllm_ops_watch_step_residual" not in figures and figures["vllm_ops_watch_step_seconds"] > 0
    assert "not judged: the baseline predicts -16 ms at batch 4: refit it on a window with this load" in said[-1]


def baseline_then(watch, host, server, monkeypatch, start=1000):
    """A baseline learned over ten known-good minutes (the batch from 4 to 28); the time after them."""
    host.metrics = server.text()
    assert polls(watch, monkeypatch, [start]) == [None]
    return serve(watch, host, server, monkeypatch, [4, 8, 12, 16, 20, 24, 28, 24, 20, 12], start + 60)


def utc(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def test_a_slowdown_held_two_minutes_is_one_incident_with_its_figures_and_what_changed(monkeypatch, tmp_path):
    host, server = Host(monkeypatch, tmp_path), Server()
    host.cfg.update(baseline_intervals=10, stall_s=600, capture_after_s=120)
    hosts = iter([{"vllm_version": "0.32.0", "nccl_environment": {"NCCL_PROTO": "LL"}},  # at the baseline
                  {"vllm_version": "0.32.0", "nccl_environment": {"NCCL_PROTO": "Simple"}}])  # at the incident
    monkeypatch.setattr(w, "fingerprint", lambda cfg, links: next(hosts))
    watch = w.Watch(host.cfg)
    t = baseline_then(watch, host, server, monkeypatch)
    assert json.loads((host.dir / "baseline.json").read_text())["host"]["nccl_environment"] == {"NCCL_PROTO": "LL"}

    # the same load, every step 30% longer: a minute above the band is no incident yet; two minutes are one
    t = serve(watch, host, server, monkeypatch, [16], t, slower=1.3)
    began = t - 120  # the first slow interval's start: the poll a minute before it closed it
    assert host.incidents() == []
    assert exported(tmp_path / "vllm_ops_watch.prom")["vllm_ops_watch_slowdown_since_timestamp_seconds"] == began
    t = serve(watch, host, server, monkeypatch, [16, 16], t, slower=1.3)
    (incident,) = host.incidents()
    step, expected = (8 + 0.25 * 16) * 1.3, 8 + 0.25 * 16  # the server's step, and the baseline's at batch 16
    assert incident["kind"] == "slowdown" and incident["stall"] is None
    assert incident["verdict"] == (f"decode steps +30% at the same load (batch 16.0: {step:.2f} ms against the "
                                   f"baseline's {expected:.2f}) since {utc(began)}, beyond the baseline's band of 10%")
    slowdown = incident["slowdown"]
    assert slowdown["held_s"] == 120 and slowdown["since"] == utc(began) and len(slowdown["intervals"]) == 2
    assert slowdown["latest"]["residual"] == pytest.approx(0.3) and slowdown["baseline"]["b"] == pytest.approx(0.25)
    assert slowdown["changes"] == ["NCCL_PROTO LL -> Simple"]
    assert incident["action"] == {"taken": "none", "why": "automatic capture is off (vllm_watch_auto_capture)"}
    assert IncidentRecord.from_dict(incident).finished()

    # back to its speed: the episode ends; slower again: a second incident, two minutes later
    t = serve(watch, host, server, monkeypatch, [16], t)
    assert "vllm_ops_watch_slowdown_since_timestamp_seconds" not in exported(tmp_path / "vllm_ops_watch.prom")
    hosts = iter([{}])
    serve(watch, host, server, monkeypatch, [16, 16, 16], t, slower=1.3)
    assert [i["kind"] for i in host.incidents()] == ["slowdown", "slowdown"]


@pytest.mark.parametrize(("settings", "holder", "seen", "why"), [
    ({"auto_capture": False}, None, {}, "automatic capture is off (vllm_watch_auto_capture)"),
    ({"armed": False}, None, {}, "the service's profiler is not armed (vllm_profiler_armed): a live capture needs it"),
    ({}, "campaign c1", {}, "campaign c1 holds the host's lock (/run/vllm-ops/job.lock)"),
    ({}, None, {"job_seen": {"at": 9000, "holder": "tune t1"}},
     "a job (tune t1) held the host's lock 1000 s ago, within vllm_watch_capture_min_interval_s (3600 s)"),
    ({}, None, {"last_capture": 6500},
     "the last capture ran 3500 s ago, within vllm_watch_capture_min_interval_s (3600 s)"),
    ({}, None, {"last_capture": 6000, "job_seen": {"at": 5000, "holder": "tune t1"}}, None),
])
def test_a_live_capture_runs_only_armed_unlocked_and_an_hour_after_a_job_or_a_capture(
        monkeypatch, tmp_path, settings, holder, seen, why):
    host = Host(monkeypatch, tmp_path)
    host.cfg.update({"auto_capture": True, "armed": True, "lock_file": "/run/vllm-ops/job.lock", **settings})
    (host.dir / "watch-state.json").write_text(json.dumps(seen))  # across the watch's restarts
    assert w.Watch(host.cfg).capture_refused(10000, holder) == why


def test_what_changed_on_the_host_is_said_in_words():
    before = {"vllm_version": "0.32.0", "driver": "550.54", "unit_files": {"/etc/u.service": "a"},
              "environment_files": {"/etc/e.env": "b"}, "nccl_environment": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"},
              "pcie_link_widths": {"0": 16, "1": 16}}
    after = {"vllm_version": "0.33.0", "driver": "550.54",
             "unit_files": {"/etc/u.service": "a", "/etc/u.d/x.conf": "c"},
             "environment_files": {"/etc/e.env": "d"}, "nccl_environment": {"NCCL_PROTO": "Simple"},
             "pcie_link_widths": {"0": 16, "1": 8}}
    assert w.changes(before, after) == [
        "vLLM 0.32.0 -> 0.33.0", "the unit's file /etc/u.d/x.conf added", "the environment file /etc/e.env changed",
        "NCCL_ALGO Ring -> (unset)", "NCCL_PROTO LL -> Simple", "GPU 1's PCIe link x16 -> x8"]
    assert w.changes(before, before) == [] and w.changes(None, after) == []
    assert w.changes({**before, "driver": None}, after)[0] == "vLLM 0.32.0 -> 0.33.0"  # unread: no change


def test_a_baseline_is_fitted_on_a_past_window_on_request_and_a_second_request_changes_nothing(
        monkeypatch, tmp_path):
    """A job vouches for a window after it (the rollout's gated benchmark): --baseline-window writes the
    request, the running watch fits on the scrapes it kept of that window, however its own learning went."""
    host, server = Host(monkeypatch, tmp_path), Server()
    host.cfg.update(baseline_intervals=1000, stall_s=600)  # never learned from live traffic in this test
    watch = w.Watch(host.cfg)
    t = 1000
    for batch in [0, 0, *[4] * 12, *[12] * 12, *[28] * 12, 0, 0]:  # an idle stretch, then the benchmark's three loads
        server.batch = batch
        if batch:
            server.advance(5.0)
        host.metrics = server.text()
        assert polls(watch, monkeypatch, [t]) == [None]
        t += 5
    assert not (host.dir / "baseline.json").exists()

    said = w.request_baseline(host.cfg, 1010, 1190, "rollout r1 (its canary's gated benchmark)")
    assert said.startswith("requested: the watch fits its baseline on rollout r1 (its canary's gated benchmark)'s "
                           "window 1970-01-01T00:16:50Z to 1970-01-01T00:19:50Z")
    polls(watch, monkeypatch, [t])
    kept = json.loads((host.dir / "baseline.json").read_text())
    # the server's steps take 8 + 0.25 * batch ms: the fit finds it from the window alone (the two intervals
    # that straddle a change of load mix two batches, a few percent off the line)
    assert kept["by"] == "rollout r1 (its canary's gated benchmark)" and kept["baseline"]["window"] == [1010, 1190]
    assert kept["baseline"]["a"] == pytest.approx(8.0, rel=0.02)
    assert kept["baseline"]["b"] == pytest.approx(0.25, rel=0.1)
    assert kept["baseline"]["intervals"] >= 10 and not (host.dir / w.BASELINE_REQUEST).exists()
    state = json.loads((host.dir / "watch-state.json").read_text())["baseline_request"]
    assert state["ok"] and state["said"].startswith("step-time baseline fitted on rollout r1")
    assert w.request_baseline(host.cfg, 1010, 1190, "rollout r1 (its canary's gated benchmark)") == (
        "unchanged: the baseline is rollout r1 (its canary's gated benchmark)'s window already")

    # a window the watch kept nothing of leaves the baseline as it was, and says why
    w.request_baseline(host.cfg, 100, 200, "an operator")
    polls(watch, monkeypatch, [t + 5])
    state = json.loads((host.dir / "watch-state.json").read_text())["baseline_request"]
    assert not state["ok"] and state["said"].startswith("no scrape of /metrics in 1970-01-01T00:01:40Z to ")
    assert json.loads((host.dir / "baseline.json").read_text())["by"] == "rollout r1 (its canary's gated benchmark)"


def test_the_window_cli_takes_unix_or_iso_times_and_refuses_a_window_that_ends_before_it_starts(tmp_path, capsys):
    config = tmp_path / "watch.json"
    config.write_text(json.dumps({"incidents_dir": str(tmp_path)}))
    assert w.main(["--config", str(config), "--baseline-window", "2026-12-05T10:00:00Z", "2026-12-05T10:10:00",
                   "--by", "the tune t1"]) == 0
    request = json.loads((tmp_path / w.BASELINE_REQUEST).read_text())
    start = 1796464800.0  # 2026-12-05T10:00:00Z, as date -d says
    assert request == {"from": start, "to": start + 600, "by": "the tune t1"}
    with pytest.raises(SystemExit):
        w.main(["--config", str(config), "--baseline-window", "1000", "900"])
    assert "is not after" in capsys.readouterr().err


def test_an_interval_it_cannot_judge_neither_ends_a_slowdown_nor_stands_for_it(monkeypatch, tmp_path):
    """A load the baseline predicts nothing for (its prediction under 0) inside a held slowdown: the slowdown
    holds on, and its incident gives the last interval that was judged, not the one that was not."""
    host, server = Host(monkeypatch, tmp_path), Server()
    host.cfg.update(baseline_intervals=10, stall_s=600, capture_after_s=120)
    watch = w.Watch(host.cfg)
    t = baseline_then(watch, host, server, monkeypatch)
    t = serve(watch, host, server, monkeypatch, [16], t, slower=1.3)
    judged = w.step_model.residual

    def not_judged(baseline, measured):
        raise w.step_model.ModelError("the baseline predicts -1 ms at batch 16")

    monkeypatch.setattr(w.step_model, "residual", not_judged)
    t = serve(watch, host, server, monkeypatch, [16], t, slower=1.3)
    assert "unjudged" in watch.slowdown.latest
    # two minutes since the first slow interval began: the incident, from the one interval judged
    (incident,) = host.incidents()
    assert incident["slowdown"]["held_s"] == 120 and len(incident["slowdown"]["intervals"]) == 1
    assert incident["verdict"].startswith("decode steps +30% at the same load (batch 16.0: 15.60 ms ")
    assert incident["slowdown"]["latest"]["residual"] == pytest.approx(0.3)
    monkeypatch.setattr(w.step_model, "residual", judged)
    serve(watch, host, server, monkeypatch, [16], t, slower=1.3)
    assert len(host.incidents()) == 1  # the same slowdown, held on: no second incident
