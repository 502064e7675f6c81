"""tune.json, read and written only through vllm_ops.records.tune (what a tune found is tests/unit/tune's)."""

from __future__ import annotations

import io
import json

import pytest

from vllm_ops.records import RecordError, TuneRecord
from vllm_ops.records.__main__ import RECORDS
from vllm_ops.records.base import write_main

VALUES = {"id": "20261205T090000Z", "host": "gpu-1", "started_at": "2026-12-05T09:00:00Z",
          "finished_at": "2026-12-05T10:00:00Z", "profile_path": "restart", "stopped": True, "applied": "LL128",
          "loads": [{"what": "variant", "name": "LL128", "status": "ok", "seconds": 10.0}],
          "downtime": {"seconds_not_ready": 61.0}, "error": None, "drift_error": None,
          "load": {"input_len": 32, "concurrencies": [1, 4]}}


def test_a_record_written_reads_back_the_same_with_its_schema(tmp_path):
    path = TuneRecord.from_dict(VALUES).dump(tmp_path)
    assert json.loads(path.read_text()) == {"schema": "vllm-ops/tune/1", **VALUES}
    record = TuneRecord.load(path)
    assert record.bench_load == {"input_len": 32, "concurrencies": [1, 4]} and record.applied == "LL128"


def test_an_earlier_releases_record_is_read_with_what_it_lacks_empty(tmp_path):
    (tmp_path / "tune.json").write_text(json.dumps({"id": "T", "host": "gpu-1", "started_at": "2026-11-01T00:00:00Z",
                                                    "loads": [{"seconds": 9.0}]}))
    record = TuneRecord.load(tmp_path / "tune.json")
    assert (record.stopped, record.applied, record.bench_load, record.profile_path) == (False, None, {}, None)


@pytest.mark.parametrize(("change", "message"), [
    ({"profile_path": "cold"}, "'profile_path' must be one of live, restart, none, got 'cold'"),
    ({"stopped": "yes"}, "'stopped' must be true or false"),
    ({"applied": {"name": "LL128"}}, "'applied' must be a non-empty string"),
    ({"loads": {"seconds": 1}}, "'loads' must be a list of the loads the tune timed"),
    ({"schema": "vllm-ops/tune/2"}, "a newer vllm-ops wrote it"),
])
def test_a_wrong_field_is_named(tmp_path, change, message):
    (tmp_path / "tune.json").write_text(json.dumps({**VALUES, **change}))
    with pytest.raises(RecordError) as caught:
        TuneRecord.load(tmp_path / "tune.json")
    assert str(caught.value).startswith(f"{tmp_path / 'tune.json'}: ") and message in str(caught.value)


def test_the_roles_values_on_stdin_are_written_finished_now(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({k: v for k, v in VALUES.items() if k != "finished_at"})))
    assert write_main(["write", "tune", str(tmp_path)], RECORDS) == 0
    written = json.loads((tmp_path / "tune.json").read_text())
    assert written["finished_at"].endswith("Z") and written["load"] == VALUES["load"]
