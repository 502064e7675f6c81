"""experiment.json, read and written only through vllm_ops.records.experiment (the figures it leads to are
tests/unit/experiment's)."""

from __future__ import annotations

import io
import json

import pytest

from vllm_ops.records import ExperimentRecord, RecordError
from vllm_ops.records.__main__ import RECORDS
from vllm_ops.records.base import write_main

LOAD = {"input_len": 32, "output_len": 16, "num_prompts": 8, "concurrencies": [1, 4], "repeats": 2, "warmups": 1,
        "seed": 0, "temperature": 0.0, "prompts_file": "", "bench_args": []}
RUN = {"variant": "baseline", "round": 1, "concurrency": 4, "repeat": 1, "file": "bench/00-baseline/c4-r1.json",
       "metrics": {"request_success_total": 8.0}}
VARIANT = {"name": "LL128", "environment": {"NCCL_PROTO": "LL128", "NCCL_ALGO": None}, "extra_args": [],
           "profile": False, "status": "failed",
           "failure": {"stage": "load", "message": "did not become healthy", "journal": ["oom"]},
           "profile_report": None, "profile_headline": None}
VALUES = {"id": "20261205T090000Z", "host": "gpu-1", "started_at": "2026-12-05T09:00:00Z",
          "finished_at": "2026-12-05T09:40:00Z", "model": "kimi", "vllm_version": "0.32.0",
          "tensor_parallel_size": 8, "load": LOAD, "noise_floor_pct": 5.0,
          "base": {"environment": {"NCCL_PROTO": "LL"}, "extra_args": ["--max-num-seqs", "32"]},
          "downtime": {"seconds_not_ready": 61.0}, "stopped": None, "variants": [VARIANT], "runs": [RUN]}


def test_a_record_written_reads_back_the_same_with_its_schema(tmp_path):
    path = ExperimentRecord.from_dict(VALUES).dump(tmp_path)
    assert json.loads(path.read_text()) == {"schema": "vllm-ops/experiment/1", **VALUES}
    assert ExperimentRecord.load(path) == ExperimentRecord.from_dict(VALUES)


def test_an_earlier_releases_record_is_read_with_what_it_lacks_empty(tmp_path):
    old = {k: v for k, v in VALUES.items() if k not in ("tensor_parallel_size", "stopped", "noise_floor_pct",
                                                          "downtime", "started_at", "finished_at")}
    (tmp_path / "experiment.json").write_text(json.dumps(old))
    record = ExperimentRecord.load(tmp_path / "experiment.json")
    assert (record.tensor_parallel_size, record.stopped, record.noise_floor_pct, record.downtime) == (None, None,
                                                                                                      1.0, None)
    # A variant's status defaults to ok, and a failed one without its failure gets one that says so.
    bare = ExperimentRecord.from_dict({**old, "variants": [{"name": "a"}, {"name": "b", "status": "failed"}],
                                       "runs": []})
    assert [v["status"] for v in bare.variants] == ["ok", "failed"]
    assert bare.variants[1]["failure"] == {"stage": None, "message": "no failure recorded", "journal": []}


@pytest.mark.parametrize(("change", "message"), [
    ({"schema": "vllm-ops/experiment/2"}, "schema 'vllm-ops/experiment/2' is not 'vllm-ops/experiment/1'"),
    ({"stoped": "x"}, "unknown field(s) stoped"),
    ({"variants": [{"name": "baseline"}]}, "variants[0]: the name 'baseline' is reserved for the normal service"),
    ({"runs": [{**RUN, "concurrency": 8}]}, "runs[0]: 'concurrency' 8 is not one of load.concurrencies [1, 4]"),
    ({"runs": [{**RUN, "variant": "LL128", "round": 2}]}, "'round' must be 1 or 2 for the baseline and 1 for a "
                                                          "variant, got 2"),
    ({"load": {**LOAD, "concurrencies": [4, 4]}}, "'load.concurrencies' lists a concurrency twice"),
    ({"tensor_parallel_size": 0}, "'tensor_parallel_size' must be a positive integer or null, got 0"),
])
def test_a_wrong_field_is_named(tmp_path, change, message):
    (tmp_path / "experiment.json").write_text(json.dumps({**VALUES, **change}))
    with pytest.raises(RecordError) as caught:
        ExperimentRecord.load(tmp_path / "experiment.json")
    assert str(caught.value).startswith(f"{tmp_path / 'experiment.json'}: ")
    assert message in str(caught.value)


def test_a_jobs_values_on_stdin_are_written_finished_now(tmp_path, monkeypatch, capsys):
    values = {k: v for k, v in VALUES.items() if k != "finished_at"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(values)))
    assert write_main(["write", "experiment", str(tmp_path / "experiment")], RECORDS) == 0
    written = json.loads((tmp_path / "experiment" / "experiment.json").read_text())
    assert written["finished_at"].endswith("Z") and written["runs"] == [RUN]
    assert capsys.readouterr().out.strip() == str(tmp_path / "experiment" / "experiment.json")


def test_values_that_do_not_make_a_record_are_refused_and_nothing_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**VALUES, "load": {}})))
    assert write_main(["write", "experiment", str(tmp_path)], RECORDS) == 2
    assert "the experiment's values: 'load.concurrencies' must be a non-empty list" in capsys.readouterr().err
    assert not (tmp_path / "experiment.json").exists()
