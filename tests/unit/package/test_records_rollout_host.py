"""A rollout's hosts/<host>.json, read and written only through vllm_ops.records.rollout_host (the report
built from them is tests/unit/rollout's)."""

from __future__ import annotations

import io
import json

import pytest

from vllm_ops.records import RecordError, RolloutHostRecord
from vllm_ops.records.__main__ import RECORDS
from vllm_ops.records.base import write_main

VALUES = {"host": "gpu-2", "stage": "fleet", "outcome": "did not load", "restarted": True,
          "error": "the change did not load", "job_id": "20261205T090000Z", "job_dir": "/art/gpu-2/20261205T090000Z",
          "started_at": "2026-12-05T09:00:00Z", "finished_at": "2026-12-05T09:10:00Z",
          "downtime": {"seconds_not_ready": 61.0}, "change": "vLLM 0.32.0 -> 0.33.0",
          "before": {"version": "0.32.0", "executable": "/opt/vllm/0.32.0/bin/vllm"},
          "after": {"version": "0.32.0", "executable": "/opt/vllm/0.32.0/bin/vllm"},
          "readback": {"pid": 4242}, "gate": None, "smoke": None}


def test_a_record_written_reads_back_the_same_named_for_its_host(tmp_path):
    path = RolloutHostRecord.from_dict(VALUES).dump(tmp_path)
    assert path == tmp_path / "gpu-2.json"
    assert json.loads(path.read_text()) == {"schema": "vllm-ops/rollout-host/1", **VALUES}
    assert RolloutHostRecord.load(path) == RolloutHostRecord.from_dict(VALUES)


def test_an_earlier_releases_record_and_empty_texts_read_as_none(tmp_path):
    old = {"host": "gpu-2", "stage": "canary", "outcome": "kept", "error": "", "gate": ""}
    record = RolloutHostRecord.from_dict(old)
    assert (record.restarted, record.error, record.gate, record.readback) == (False, None, None, None)


@pytest.mark.parametrize(("change", "message"), [
    ({"stage": "batch"}, "'stage' must be canary or fleet, got 'batch'"),
    ({"outcome": "rolled back"}, "'outcome' must be one of"),
    ({"restarted": "yes"}, "'restarted' must be true or false"),
    ({"after": "0.33.0"}, "'after' must be an object or null, not str"),
])
def test_a_wrong_field_is_named(change, message):
    with pytest.raises(RecordError, match=message):
        RolloutHostRecord.from_dict({**VALUES, **change}, "hosts/gpu-2.json")


def test_the_roles_values_on_stdin_are_written_finished_now(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({k: v for k, v in VALUES.items() if k != "finished_at"})))
    assert write_main(["write", "rollout-host", str(tmp_path / "hosts")], RECORDS) == 0
    assert json.loads((tmp_path / "hosts" / "gpu-2.json").read_text())["finished_at"].endswith("Z")
