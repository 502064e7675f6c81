"""What a directory means, and captures that are not one (issue 20, points 6 and 7).

A directory of rank traces holds what else a user's shell and vLLM put there: vLLM's front-end
trace, a previous summary, the summary being written. And traces concatenated from several
captures repeat their ids. The fixtures are derived here from the real H200 pair under
``tmp_path``; the expected figures come from the events, computed in the test.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, TraceInputError, summarize

H200 = Path(__file__).resolve().parents[3] / "tests" / "data" / "traces" / "h200_tp2_decode"
RANKS = (0, 1)
SHIFT_US = 10_000_000.0  # the second capture, 10 s after the first


def _copy_pair(directory: Path) -> None:
    for r in RANKS:
        shutil.copy(H200 / f"tp2_rank{r}.pt.trace.json.gz", directory / f"tp2_rank{r}.pt.trace.json.gz")


def _frontend_trace(path: Path) -> None:
    """vLLM's API-server trace: CPU events only, no distributedInfo."""
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "execute_context_0(0)_generation_1(1)", "pid": 1, "tid": 1,
         "ts": 10.0, "dur": 5.0, "args": {"External id": 1}}]}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_a_directory_reads_its_rank_traces_only(tmp_path):
    _copy_pair(tmp_path)
    front = tmp_path / "host_123.async_llm.1790857026000000000.pt.trace.json.gz"
    _frontend_trace(front)
    other = tmp_path / "engine_core.1790857026000000000.pt.trace.json.gz"  # no rank in the name, no distributedInfo
    _frontend_trace(other)
    previous = summarize([str(H200)], SummaryOptions(decode_pattern="^decode"))
    (tmp_path / "summary.json").write_text(json.dumps(previous))
    (tmp_path / "empty.json").write_text("")
    s = summarize([str(tmp_path)], SummaryOptions(decode_pattern="^decode"))
    assert [Path(r["file"]).name for r in s["ranks"]] == ["tp2_rank0.pt.trace.json.gz", "tp2_rank1.pt.trace.json.gz"]
    skipped = {Path(x["file"]).name: x["why"] for x in s["inputs"]["skipped"]}
    assert set(skipped) == {front.name, other.name, "summary.json", "empty.json"}
    assert skipped[front.name].startswith("vLLM's front-end (API server) trace")
    assert skipped[other.name].startswith("no rank in its name and no distributedInfo")
    assert any(w.startswith(f"skipped {front}: vLLM's front-end") for w in s["warnings"])
    assert any(w.startswith(f"skipped {other}: no rank in its name") for w in s["warnings"])
    # the same answer as the pair alone
    assert (s["verdict"]["kind"], s["verdict"]["rank"]) == (previous["verdict"]["kind"], previous["verdict"]["rank"])
    assert s["ranks"][1]["steps"] == previous["ranks"][1]["steps"]


def test_the_summary_never_reads_the_file_it_is_writing(tmp_path):
    _copy_pair(tmp_path)
    # as a user types it: the shell creates summary.json (empty) before the summary lists the directory
    cmd = f"{sys.executable} -m vllm_ops.traces.cli . --decode-pattern '^decode' > summary.json"
    proc = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    s = json.loads((tmp_path / "summary.json").read_text())
    assert [x["why"] for x in s["inputs"]["skipped"]] == ["the file this summary is written to"]
    # in a directory of plain JSON traces too (where every *.json is read)
    plain = tmp_path / "plain"
    plain.mkdir()
    for r in RANKS:
        shutil.copy(H200 / f"tp2_rank{r}.pt.trace.json.gz", plain / f"r{r}.json.gz")
    proc = subprocess.run(f"{sys.executable} -m vllm_ops.traces.cli . --decode-pattern '^decode' > out.json",
                          shell=True, cwd=plain, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads((plain / "out.json").read_text())["ranks"]) == 2


def test_a_file_given_by_name_that_is_the_output_is_refused(tmp_path):
    out = tmp_path / "x_rank0.pt.trace.json.gz"
    shutil.copy(H200 / "tp2_rank0.pt.trace.json.gz", out)
    with pytest.raises(TraceInputError, match="is the file this summary is being written to"):
        summarize([str(out)], SummaryOptions(exclude=[str(out)]))


def _concatenated(directory: Path, shift_us: float) -> dict:
    """Each rank's events followed by a copy of them ``shift_us`` later, ids unchanged."""
    docs = {}
    for r in RANKS:
        with gzip.open(H200 / f"tp2_rank{r}.pt.trace.json.gz") as fh:
            doc = json.load(fh)
        again = copy.deepcopy(doc["traceEvents"])
        for e in again:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += shift_us
        doc["traceEvents"] += again
        docs[r] = doc
        (directory / f"tp2_rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return docs


def test_a_concatenated_capture_is_paired_by_order_and_split_into_its_captures(tmp_path):
    docs = _concatenated(tmp_path, SHIFT_US)
    one = summarize([str(H200)], SummaryOptions(decode_pattern="^decode"))
    s = summarize([str(tmp_path)], SummaryOptions(decode_pattern="^decode"))
    for r in RANKS:
        ids = [e["args"]["External id"] for e in docs[r]["traceEvents"]
               if e.get("cat") == "gpu_user_annotation" and e["name"] == "decode_step"]
        assert len(ids) == 24 and len(set(ids)) == 12  # every id twice
        assert s["sanity"]["repeated_ids"][str(r)] == 24 and s["sanity"]["pairing"][str(r)] == "order"
        steps = s["ranks"][r]["steps"]
        # nothing impossible: no negative period, no step busier than its period
        assert all(x["period_ms"] is None or x["period_ms"] > 0 for x in steps)
        assert all(x["period_ms"] is None or x["busy_ms"] <= x["period_ms"] for x in steps)
        # the second capture is the first one again: the same figures, step for step
        for a, b in zip(steps[:12], steps[12:], strict=True):
            assert (b["capture"], a["capture"]) == (1, 0)
            for key in ("period_ms", "window_ms", "busy_ms", "cpu_ms", "host_step_ms", "lead_ms"):
                assert b[key] == pytest.approx(a[key], abs=1e-3), key
        assert steps[11]["period_ms"] is None  # the 10 s between the captures is no step's period
    assert [x["index"] for x in s["steady_state"]["left_out"]] == [0, 12]  # each capture's first step
    assert s["sanity"]["refused"] is None and s["regimes"] == []
    assert (s["verdict"]["kind"], s["verdict"]["rank"]) == (one["verdict"]["kind"], one["verdict"]["rank"])
    assert s["verdict"]["evidence"]["predicted_period_ms"] == pytest.approx(
        one["verdict"]["evidence"]["predicted_period_ms"], abs=0.05)
    # the lead's trend is read within each capture: the same as one capture's
    for r in RANKS:
        assert s["pace"]["ranks"][str(r)]["lead_change_ms"] == pytest.approx(
            one["pace"]["ranks"][str(r)]["lead_change_ms"], abs=1e-3)
    assert any("2 captures concatenated" in w and "paired by order" in w for w in s["warnings"])


def test_overlapping_concatenated_captures_are_refused(tmp_path):
    # the second copy starts 5 ms after the first: its steps interleave with the first's
    _concatenated(tmp_path, 5_000.0)
    s = summarize([str(tmp_path)], SummaryOptions(decode_pattern="^decode"))
    v = s["verdict"]
    assert v["kind"] == "inconclusive" and v["reason"].startswith("impossible figures: ")
    # what it names is impossible indeed: a step busier than its period, from the summary's own rows
    rank, bad = next(iter(s["sanity"]["impossible"].items()))
    index, what = bad[0]
    step = s["ranks"][int(rank)]["steps"][index]
    assert step["busy_ms"] > step["period_ms"] or step["period_ms"] < 0
    assert f"rank {rank} step {index}: {what}" in v["reason"]
    assert s["regimes"] == []


def test_negative_durations_are_dropped_and_said(tmp_path, write_trace, ev):
    events = [ev.span("execute_context_0(0)_generation_1(1)", 0.0, 100.0), ev.kernel("nvjet_x", 1.0, 4.0),
              ev.kernel("nvjet_x", 10.0, -3.0), ev.span("execute_context_0(0)_generation_1(1)", 200.0, -1.0)]
    for layout in ("torch", "minified"):
        s = summarize([write_trace(f"r_{layout}.json.gz", events, layout=layout)])
        assert s["sanity"]["negative_durations"] == {"0": 2}
        assert s["ranks"][0]["decode_steps"] == 1 and s["ranks"][0]["gpu_kernels"] == 1
        assert any("2 GPU activities or step annotations have a negative duration and were dropped" in w
                   for w in s["warnings"])
