"""job.json, read and written only through vllm_ops.records.job."""

from __future__ import annotations

import io
import json

import pytest

from vllm_ops.records import JobRecord, RecordError
from vllm_ops.records.__main__ import RECORDS
from vllm_ops.records.base import write_main

LOAD = {"variant": None, "ready": True, "total_s": 12.5, "phases": [{"name": "weights", "seconds": 8.0}]}
VALUES = {"id": "20261205T090000Z", "kind": "experiment", "host": "gpu-1", "controller": "ops-1",
          "started_at": "2026-12-05T09:00:00Z", "finished_at": "2026-12-05T09:40:00Z",
          "downtime": {"seconds_not_ready": 61.0}, "loads": [LOAD], "disk": {"gbps": 2.0},
          "page_cache_warmed": None, "error": None}


def test_a_record_written_reads_back_the_same_with_its_schema(tmp_path):
    path = JobRecord.from_dict(VALUES).dump(tmp_path)
    on_disk = json.loads(path.read_text())
    assert path == tmp_path / "job.json"
    assert on_disk == {"schema": "vllm-ops/job/1", **VALUES}
    assert JobRecord.read(tmp_path) == JobRecord.from_dict(VALUES)


def test_an_earlier_releases_record_is_read_with_what_it_lacks_empty(tmp_path):
    (tmp_path / "job.json").write_text(json.dumps({
        "id": "20261101T000000Z", "host": "gpu-1", "started_at": "2026-11-01T00:00:00Z",
        "finished_at": "2026-11-01T00:30:00Z", "downtime": None}))
    job = JobRecord.read(tmp_path)
    assert (job.kind, job.loads, job.disk, job.error) == (None, [], None, None)
    assert job.to_dict()["schema"] == "vllm-ops/job/1"


def test_no_job_json_is_none(tmp_path):
    assert JobRecord.read(tmp_path) is None


@pytest.mark.parametrize(("change", "message"), [
    ({"schema": "vllm-ops/job/2"}, "schema 'vllm-ops/job/2' is not 'vllm-ops/job/1': a newer vllm-ops wrote it"),
    ({"loads": [{"total_s": 3}]}, "'loads' must be a list of load records, each with its phases"),
    ({"started_at": "yesterday"}, "'started_at' is no time"),
    ({"host": ""}, "'host' must be a non-empty string"),
    ({"disk": [2.0]}, "'disk' must be an object or null, not list"),
    ({"stoped": True}, "unknown field(s) stoped"),
])
def test_a_wrong_field_is_named(tmp_path, change, message):
    (tmp_path / "job.json").write_text(json.dumps({**VALUES, **change}))
    with pytest.raises(RecordError) as caught:
        JobRecord.read(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'job.json'}: ")
    assert message in str(caught.value)


def test_the_skeletons_values_on_stdin_are_written_finished_now(tmp_path, monkeypatch, capsys):
    values = {k: v for k, v in VALUES.items() if k != "finished_at"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(values)))
    assert write_main(["write", "job", str(tmp_path)], RECORDS) == 0
    written = json.loads((tmp_path / "job.json").read_text())
    assert written["finished_at"].endswith("Z") and written["loads"] == [LOAD]
    assert capsys.readouterr().out.strip() == str(tmp_path / "job.json")


def test_values_the_record_does_not_know_are_refused_and_nothing_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**VALUES, "downtme": {}})))
    assert write_main(["write", "job", str(tmp_path)], RECORDS) == 2
    assert "the job's values: unknown field(s) downtme" in capsys.readouterr().err
    assert not (tmp_path / "job.json").exists()
