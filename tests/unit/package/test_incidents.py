"""src/vllm_ops/incidents.py: which of a host's incidents to fetch, and the report over every host's,
from incidents laid out as playbooks/incidents.yml fetches them (written here by hand, as the watch
writes them)."""

from __future__ import annotations

import json

from vllm_ops import incidents
from vllm_ops_host import loads

T0 = 1000.0


def write(path, name, data):
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(json.dumps(data) if not isinstance(data, str) else data)


def thread(*frames, name="MainThread"):
    return {"thread": name, "idle": False, "frames": list(frames)}


def a_load():
    """A restart's load as the watch records it: started at T0, weights from 2 s to 9.5 s, ready at 12 s."""
    lines = [(T0 + 2.0, "Starting to load model /m ..."), (T0 + 9.5, "Loading weights took 7.10 seconds"),
             (T0 + 12.0, "INFO:     Application startup complete.")]
    return loads.parse_load(lines, t0=T0)


def an_incident(time, action, verdict="the engine (VLLM::EngineCore, pid 11) is stopped"):
    return {
        "time": time, "verdict": verdict, "action": action,
        "stall": {"stalled_s": 21.0, "stall_s": 20.0, "derived": False, "reading": {"busy": 3.0}},
        "nccl_environment": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"},
        "processes": [
            {"pid": 12, "role": "worker", "rank": 0, "name": "VLLM::Worker_TP0", "state": "S (sleeping)",
             "wchan": "futex_wait_queue", "threads": [{"tid": 12}], "py_spy": None,
             "py_spy_error": "Permission denied"},
            {"pid": 11, "role": "engine", "rank": None, "name": "VLLM::EngineCore", "state": "T (stopped)",
             "wchan": "do_signal_stop", "threads": [{"tid": 11}, {"tid": 13}],
             "py_spy": [thread("wait (threading.py:327)", name="Thread-1"),
                        thread("a", "b", "c", "d", "run_engine_core (core.py:900)")]},
            {"pid": 10, "role": "API server", "rank": None, "name": "vllm", "state": "S (sleeping)",
             "wchan": "ep_poll", "threads": [{"tid": 10}], "py_spy": [thread("select (selectors.py:468)")]},
        ]}


def test_pending_is_what_is_not_here_or_was_fetched_unfinished(tmp_path):
    here = tmp_path / "h1" / "incidents"
    write(here / "20261204T100000Z", "incident.json", an_incident("20261204T100000Z", {"taken": "restart", "ok": True}))
    write(here / "20261204T100100Z", "incident.json", an_incident("20261204T100100Z", {"taken": "restart", "ok": None}))
    write(here / "20261204T100200Z", "incident.json", an_incident("20261204T100200Z", {"taken": "none", "why": "x"}))
    write(here / "20261204T100300Z", "incident.json", an_incident("20261204T100300Z", None))
    write(here / "20261204T100400Z", "incident.json", "{not json")
    names = ["20261204T100500Z", "20261204T100400Z", "20261204T100300Z", "20261204T100200Z", "20261204T100100Z",
             "20261204T100000Z", "watch-state.json", "lost+found"]
    # the restart still waited for, the one with no action yet, the damaged copy, the new one
    assert incidents.pending(here, names) == ["20261204T100100Z", "20261204T100300Z", "20261204T100400Z",
                                              "20261204T100500Z"]
    assert incidents.pending(tmp_path / "nowhere", ["20261204T100000Z"]) == ["20261204T100000Z"]


def test_the_report_reads_every_hosts_incidents_newest_first(tmp_path, capsys):
    restarted = {"taken": "restart", "ok": True, "old_main_pid": 10, "main_pid": 20, "seconds_to_healthy": 14.0,
                 "load": a_load()}
    h1 = tmp_path / "h1" / "incidents"
    write(h1 / "20261204T100000Z", "incident.json", an_incident("20261204T100000Z", restarted))
    write(h1 / "20261204T100000Z", "py-spy-11.txt", "Thread 11")
    write(h1 / "20261204T110000Z", "incident.json",
          an_incident("20261204T110000Z", {"taken": "none", "why": "campaign c1 holds the host's lock"},
                      verdict="worker rank 0 is inside a collective"))
    write(h1, "watch-state.json", {"said": "idle", "restarts": [T0]})
    (tmp_path / "h2" / "incidents").mkdir(parents=True)

    assert incidents.main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "h1 20261204T110000Z: worker rank 0 is inside a collective; recorded, not restarted: campaign c1 holds "
        "the host's lock",
        "h1 20261204T100000Z: the engine (VLLM::EngineCore, pid 11) is stopped; restarted: main PID 10 -> 20, "
        "healthy again in 14.0 s",
        f"report: {tmp_path}/incidents.md",
        "2 incident(s) on 1 of 2 host(s): 1 restarted, 1 recorded only; newest h1 20261204T110000Z: worker rank 0 "
        "is inside a collective"]
    report = (tmp_path / "incidents.md").read_text()
    assert "| h1 | idle | 1 | 2 |" in report and "| h2 | - | - | 0 |" in report
    # the restart's load in the loads' words: 2.0 s to the load's start, 7.5 s of weights, 2.5 s to ready
    assert "- **The restart's load**: ready in 12.0 s: start 2.0 s, weights 7.5 s, API start 2.5 s" in report
    assert "- **Stall**: no step for 21.0 s with 3 request(s) in flight (stall after 20.0 s)" in report
    assert "- **NCCL settings**: NCCL_ALGO=Ring, NCCL_PROTO=LL" in report
    evidence = [line for line in report.splitlines() if line.startswith("- **Evidence**")]
    assert evidence == [f"- **Evidence** (`{h1}/20261204T110000Z`): incident.json only",
                        f"- **Evidence** (`{h1}/20261204T100000Z`): py-spy-11.txt"]
    # processes: the API server, the engine, the workers; the main thread's four innermost frames
    rows = [line for line in report.splitlines() if line.startswith("| ") and "(" in line.split("|")[1]]
    assert rows[:3] == [
        "| API server (vllm) | 10 | S (sleeping) | ep_poll | 1 | select (selectors.py:468) |",
        "| engine (VLLM::EngineCore) | 11 | T (stopped) | do_signal_stop | 2 | a < b < c < d |",
        "| worker rank 0 (VLLM::Worker_TP0) | 12 | S (sleeping) | futex_wait_queue | 1 | no Python stack: "
        "Permission denied |"]


def test_bad_input_is_one_line_and_an_unfinished_restart_says_so(tmp_path, capsys):
    write(tmp_path / "h1" / "incidents" / "20261204T100000Z", "incident.json", "[]")
    assert incidents.main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"vllm-incidents-report: error: {tmp_path}/h1/incidents/20261204T100000Z/incident.json: "
        "an incident record must be a JSON object, not list")
    assert not (tmp_path / "incidents.md").exists()
    assert incidents.main(["report", str(tmp_path / "none")]) == 2
    assert "no such directory (run playbooks/incidents.yml first)" in capsys.readouterr().err
    write(tmp_path / "h1" / "incidents" / "20261204T100000Z", "incident.json",
          an_incident("20261204T100000Z", {"taken": "restart", "ok": None, "old_main_pid": 10}))
    assert incidents.main(["report", str(tmp_path)]) == 0
    assert "restart under way (main PID 10) when fetched: fetch again for its outcome" in capsys.readouterr().out


def a_slowdown(time, host_at_baseline, changes, action):
    return {"schema": "vllm-ops/incident/2", "kind": "slowdown", "time": time, "stall": None, "processes": [],
            "verdict": "decode steps +30% at the same load (batch 16.0: 15.60 ms against the baseline's 12.00)",
            "nccl_environment": {"NCCL_PROTO": "LL"}, "action": action,
            "slowdown": {"since": "2026-12-05T10:00:00Z", "held_s": 125.0,
                         "latest": {"step_ms": 15.6, "expected_ms": 12.0, "residual": 0.3, "band": 0.1, "batch": 16.0},
                         "baseline": {"a": 8.0, "b": 0.25, "c": 0.0, "band": 0.1, "intervals": 10, "batch": [4, 28]},
                         "fitted_at": "2026-12-05T09:00:00Z", "baseline_by": "rollout r1's gated benchmark",
                         "host_at_baseline": host_at_baseline, "host_now": host_at_baseline, "changes": changes}}


def test_a_slowdown_is_reported_with_its_baseline_what_changed_and_why_nothing_was_captured(tmp_path, capsys):
    h1 = tmp_path / "h1" / "incidents"
    off = {"taken": "none", "why": "automatic capture is off (vllm_watch_auto_capture)"}
    write(h1 / "20261205T100200Z", "incident.json",
          a_slowdown("20261205T100200Z", {"vllm_version": "0.33.0"}, ["NCCL_PROTO LL -> Simple"], off))
    write(h1 / "20261205T120200Z", "incident.json", a_slowdown("20261205T120200Z", None, [], off))
    assert incidents.main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "2 incident(s) on 1 of 1 host(s): 2 slowdown(s), 0 captured, 2 recorded only; newest h1 20261205T120200Z: "
        "decode steps +30%")
    report = (tmp_path / "incidents.md").read_text()
    assert report.count("## h1 2026120") == 2 and "20261205T100200Z: a slowdown" in report
    assert ("- **The slowdown**: step 15.60 ms at batch 16.0, the baseline's 12.00 ms at that batch: +30% (band 10%), "
            "since 2026-12-05T10:00:00Z, held 2.1 min") in report  # the loads' words for 125 s
    assert ("- **The baseline**: fitted 2026-12-05T09:00:00Z from rollout r1's gated benchmark on 10 intervals at "
            "batch 4.0 to 28.0: 8.00 ms + 0.250 ms a sequence, band 10%") in report
    assert "- **What changed on the host since the baseline**: NCCL_PROTO LL -> Simple" in report
    # a baseline from before the watch kept the host's fingerprint: not known, rather than "nothing"
    assert "- **What changed on the host since the baseline**: not known: the baseline was fitted before" in report
    assert report.count("- **Live capture**: none: automatic capture is off (vllm_watch_auto_capture)") == 2
    assert "| process |" not in report  # a slowdown has no process table
