"""summary.json, read and written only through vllm_ops.records.summary (what a summary finds is tests/unit/traces')."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_ops.records import RecordError, SummaryRecord
from vllm_ops.traces import SummaryOptions, summarize

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces" / "h200_tp2_decode"


def test_a_summary_written_reads_back_the_same_with_its_schema(tmp_path):
    summary = summarize([str(TRACES)], SummaryOptions(decode_pattern="^decode_step$"))
    path = SummaryRecord.from_dict(summary).dump(tmp_path)
    assert path == tmp_path / "summary.json"
    assert json.loads(path.read_text()) == {"schema": "vllm-ops/summary/1", **json.loads(json.dumps(summary))}
    again = SummaryRecord.load(path)
    assert [r["rank"] for r in again.ranks] == [0, 1] and again.verdict["kind"] == summary["verdict"]["kind"]


def test_an_earlier_releases_summary_reads_with_the_fields_added_since_empty(tmp_path):
    # a summary as the first releases wrote it: no schema, none of pace, regimes, stalls, coverage, ledger, fabric
    old = {"decode_pattern": "^decode_step$", "prefill_pattern": "x", "world_size": 2, "ranks": [{"rank": 0}],
           "allreduce": {"share_mean": 0.5}, "prefill": [], "warnings": ["a warning"]}
    (tmp_path / "summary.json").write_text(json.dumps(old))
    record = SummaryRecord.load(tmp_path / "summary.json")
    assert (record.pace, record.regimes, record.stalls, record.ledger, record.fabric) == (None, [], None, None, [])
    assert record.to_dict()["schema"] == "vllm-ops/summary/1" and record.warnings == ["a warning"]


@pytest.mark.parametrize(("content", "message"), [
    ([1, 2], "a trace summary must be a JSON object, not list"),
    ({"ranks": [3]}, "'ranks' entry 0 must be an object, not int"),
    ({"ranks": {}}, "'ranks' must be a list, not dict"),
    ({"verdict": "host-bound"}, "'verdict' must be an object or null, not str"),
    ({"world_size": "2"}, "'world_size' must be int or null, got '2'"),
    ({"warnings": [{"code": "stall"}]}, "'warnings' must be a list of texts"),
    ({"ranks": [], "notes": []}, "unknown field(s) notes"),
    ({"schema": "vllm-ops/summary/2"}, "a newer vllm-ops wrote it"),
])
def test_a_wrong_field_is_named(tmp_path, content, message):
    (tmp_path / "summary.json").write_text(json.dumps(content))
    with pytest.raises(RecordError) as caught:
        SummaryRecord.load(tmp_path / "summary.json")
    assert str(caught.value).startswith(f"{tmp_path / 'summary.json'}: ") and message in str(caught.value)
