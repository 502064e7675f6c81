"""incident.json, written by the watch on the host, read on the controller only through vllm_ops.records.incident."""

from __future__ import annotations

import json

import pytest

from vllm_ops.records import IncidentRecord, RecordError

PROCESS = {"pid": 11, "role": "engine", "rank": None, "name": "VLLM::EngineCore", "state": "T (stopped)",
           "wchan": "do_signal_stop", "threads": [{"tid": 11}], "py_spy": None, "py_spy_error": None}
VALUES = {"time": "20261205T100000Z", "unit": "vllm", "invocation_id": "abc", "main_pid": 10,
          "verdict": "the engine (VLLM::EngineCore, pid 11) is stopped",
          "stall": {"stalled_s": 21.0, "stall_s": 20.0}, "nccl_environment": {"NCCL_PROTO": "LL"},
          "nvidia_smi": False, "processes": [PROCESS],
          "action": {"taken": "restart", "ok": True, "old_main_pid": 10, "main_pid": 20}}


SLOWDOWN = {"since": "2026-12-05T10:00:00Z", "held_s": 125.0,
            "latest": {"step_ms": 11.4, "expected_ms": 8.75, "residual": 0.303, "band": 0.1, "batch": 3.9},
            "intervals": [], "baseline": {"a": 3.75, "b": 1.25, "c": 0.0, "band": 0.1},
            "fitted_at": "2026-12-05T09:50:00Z",
            "host_at_baseline": None, "host_now": None, "changes": ["NCCL_PROTO LL -> Simple"]}


def test_the_watchs_record_reads_back_the_same_and_earlier_ones_as_a_stall_of_schema_2(tmp_path):
    both = {"kind": "stall", "slowdown": None, "capture": None}
    (tmp_path / "incident.json").write_text(json.dumps({"schema": "vllm-ops/incident/2", **VALUES, **both}))
    record = IncidentRecord.load(tmp_path / "incident.json")
    assert record.to_dict() == {"schema": "vllm-ops/incident/2", **VALUES, **both}
    # earlier releases': schema 1 (no kind, no slowdown, no capture), and schema 0 (no schema either)
    (tmp_path / "incident.json").write_text(json.dumps({"schema": "vllm-ops/incident/1", **VALUES}))
    assert IncidentRecord.load(tmp_path / "incident.json") == record
    (tmp_path / "incident.json").write_text(json.dumps(VALUES))
    assert IncidentRecord.load(tmp_path / "incident.json") == record


def test_a_slowdown_reads_back_with_its_figures_and_its_capture():
    capture = {"ok": True, "prefix": "watch-20261205T100205Z", "traces": [{"rank": 0, "file": "a.json.gz"}]}
    values = {**VALUES, "kind": "slowdown", "stall": None, "processes": [], "slowdown": SLOWDOWN, "capture": capture,
              "action": {"taken": "capture", "ok": True}}
    record = IncidentRecord.from_dict(values)
    assert (record.kind, record.slowdown, record.capture) == ("slowdown", SLOWDOWN, capture)
    assert record.to_dict() == {"schema": "vllm-ops/incident/2", **values}


@pytest.mark.parametrize(("action", "finished"), [
    (None, False),  # the watch is still deciding
    ({"taken": "restart", "ok": None, "old_main_pid": 10}, False),  # the restart's outcome not written yet
    ({"taken": "restart", "ok": False, "why": "not healthy"}, True),
    ({"taken": "none", "why": "a job holds the host's lock"}, True),
    ({"taken": "capture", "ok": None}, False),  # written before a capture, which may take minutes
    ({"taken": "capture", "ok": False, "why": "/start_profile answered 404"}, True),
])
def test_finished_once_the_watch_wrote_what_it_did(action, finished):
    assert IncidentRecord.from_dict({**VALUES, "action": action}).finished() is finished


@pytest.mark.parametrize(("change", "message"), [
    ({"schema": "vllm-ops/incident/3"}, "schema 'vllm-ops/incident/3' is not 'vllm-ops/incident/2'"),
    ({"kind": "slow"}, "'kind' must be one of stall, slowdown, got 'slow'"),
    ({"slowdown": []}, "'slowdown' must be an object or null, not list"),
    ({"verdict": ""}, "'verdict' must be a non-empty string"),
    ({"main_pid": "10"}, "'main_pid' must be a process id (an integer >= 0) or null, got '10'"),
    ({"processes": [7]}, "'processes' must be a list of objects"),
    ({"nvidia_smi": "no"}, "'nvidia_smi' must be true or false, got 'no'"),
    ({"action": "restart"}, "'action' must be an object or null, not str"),
    ({"verdicts": []}, "unknown field(s) verdicts"),
])
def test_a_wrong_field_is_named(tmp_path, change, message):
    (tmp_path / "incident.json").write_text(json.dumps({**VALUES, **change}))
    with pytest.raises(RecordError) as caught:
        IncidentRecord.load(tmp_path / "incident.json")
    assert str(caught.value).startswith(f"{tmp_path / 'incident.json'}: ") and message in str(caught.value)
