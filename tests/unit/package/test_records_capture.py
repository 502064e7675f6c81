"""capture.json, read and written only through vllm_ops.records.capture."""

from __future__ import annotations

import io
import json

import pytest

from vllm_ops.records import CaptureRecord, RecordError
from vllm_ops.records.__main__ import RECORDS
from vllm_ops.records.base import write_main

TRACE = {"rank": 0, "path": "/var/lib/vllm/traces/r0.pt.trace.json.gz", "file": "r0.pt.trace.json.gz",
         "bytes": 1234, "sha256": "ab" * 32}
VALUES = {
    "id": "20261205T090000Z", "prefix": "20261205T090000Z", "host": "gpu-1", "started_at": "2026-12-05T09:00:00Z",
    "finished_at": "2026-12-05T09:05:00Z", "model": "moonshotai/Kimi-K2.5", "vllm_version": "0.32.0",
    "tensor_parallel_size": 8, "variant": None, "environment": {"NCCL_PROTO": "LL"}, "path": "live (armed)",
    "settings": {"model_path": "/models/kimi", "gpu_memory_utilization": 0.9, "max_model_len": 32768,
                 "extra_args": "--max-num-seqs 8"},
    "profiler_config": {"profiler": "torch"},
    "load": {"requests": 4, "concurrency": 2, "batch_size": 2, "prompt_tokens": 128, "output_tokens": 64,
             "warmup_requests": 2, "stop_profile_s": 12.5},
    "samples": {"ttft_ms": [80.0, 91.5], "tpot_ms": [21.7, 22.1]}, "traces": [TRACE],
    "checkpoint": None, "fabric": {"links": []},
}


def test_a_record_written_reads_back_the_same_with_its_schema(tmp_path):
    path = CaptureRecord.from_dict(VALUES).dump(tmp_path)
    assert path == tmp_path / "capture.json"
    assert json.loads(path.read_text()) == {"schema": "vllm-ops/capture/1", **VALUES}
    assert CaptureRecord.load(path) == CaptureRecord.from_dict(VALUES)


def test_an_earlier_releases_record_shaped_in_yaml_is_read_with_its_numbers(tmp_path):
    """Schema 0: Ansible's templated strings for numbers, the arguments a list, no finished_at, checkpoint or
    fabric; read as schema 1 with the numbers as numbers."""
    old = {k: v for k, v in VALUES.items() if k not in ("finished_at", "checkpoint", "fabric")}
    old.update(tensor_parallel_size="8",
               settings={"model_path": "/models/kimi", "gpu_memory_utilization": "0.9", "max_model_len": "32768",
                         "extra_args": ["--max-num-seqs", "8"]},
               load={"requests": "4", "concurrency": "2", "batch_size": "2", "prompt_tokens": "128",
                     "output_tokens": "64", "warmup_requests": "2", "stop_profile_s": "12.5"},
               samples={"ttft_ms": ["80", 91.5], "tpot_ms": [21.7, "22.1"]},
               traces=[{**TRACE, "rank": "0", "bytes": "1234"}])
    (tmp_path / "capture.json").write_text(json.dumps(old))
    record = CaptureRecord.load(tmp_path / "capture.json").to_dict()
    assert record == {"schema": "vllm-ops/capture/1", **VALUES, "finished_at": None, "fabric": None}


@pytest.mark.parametrize(("change", "message"), [
    ({"schema": "vllm-ops/capture/2"}, "schema 'vllm-ops/capture/2' is not 'vllm-ops/capture/1'"),
    ({"tensor_parallel_size": 0}, "'tensor_parallel_size' must be an integer >= 1, got 0; correct it, or re-run"),
    ({"path": "sideways"}, "'path' must say 'live (...)' or 'restart (...)', got 'sideways'"),
    ({"profiler_config": [1]}, "'profiler_config' must be a mapping, a string or null, got list"),
    ({"traces": [TRACE, TRACE]}, "'traces' names a rank twice: [0, 0]"),
    ({"samples": {"ttft_ms": [-1], "tpot_ms": []}}, "'samples.ttft_ms[0]' must be a number >= 0, got -1"),
    ({"finished_at": "later"}, "'finished_at' is no time"),
    ({"traces_dir": "/tmp"}, "unknown field(s) traces_dir"),
])
def test_a_wrong_field_is_named(tmp_path, change, message):
    (tmp_path / "capture.json").write_text(json.dumps({**VALUES, **change}))
    with pytest.raises(RecordError) as caught:
        CaptureRecord.load(tmp_path / "capture.json")
    assert str(caught.value).startswith(f"{tmp_path / 'capture.json'}: ")
    assert message in str(caught.value)


def test_the_captures_values_on_stdin_are_written_finished_now(tmp_path, monkeypatch, capsys):
    values = {k: v for k, v in VALUES.items() if k != "finished_at"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(values)))
    assert write_main(["write", "capture", str(tmp_path)], RECORDS) == 0
    written = json.loads((tmp_path / "capture.json").read_text())
    assert written["finished_at"].endswith("Z") and written["load"] == VALUES["load"]
    assert capsys.readouterr().out.strip() == str(tmp_path / "capture.json")
