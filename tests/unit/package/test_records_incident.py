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


def test_the_watchs_record_reads_back_the_same_and_an_earlier_one_as_schema_1(tmp_path):
    (tmp_path / "incident.json").write_text(json.dumps({"schema": "vllm-ops/incident/1", **VALUES}))
    record = IncidentRecord.load(tmp_path / "incident.json")
    assert record.to_dict() == {"schema": "vllm-ops/incident/1", **VALUES}
    (tmp_path / "incident.json").write_text(json.dumps(VALUES))  # an earlier release's: no schema
    assert IncidentRecord.load(tmp_path / "incident.json") == record


@pytest.mark.parametrize(("action", "finished"), [
    (None, False),  # the watch is still deciding
    ({"taken": "restart", "ok": None, "old_main_pid": 10}, False),  # the restart's outcome not written yet
    ({"taken": "restart", "ok": False, "why": "not healthy"}, True),
    ({"taken": "none", "why": "a job holds the host's lock"}, True),
])
def test_finished_once_the_watch_wrote_what_it_did(action, finished):
    assert IncidentRecord.from_dict({**VALUES, "action": action}).finished() is finished


@pytest.mark.parametrize(("change", "message"), [
    ({"schema": "vllm-ops/incident/2"}, "schema 'vllm-ops/incident/2' is not 'vllm-ops/incident/1'"),
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
