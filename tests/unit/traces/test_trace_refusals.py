"""What is no trace, or no capture, is said to be one (issue 30, points 3 and 10).

Each case writes its file here; the expected words are the ones the issue asks for: an empty
capture says the profiler wrote nothing and what to do, a structurally wrong trace says what
was found, and a bare array of events (Chrome's JSON Array Format) is a trace.
"""

from __future__ import annotations

import gzip
import json

import pytest

from vllm_ops.traces import SummaryOptions, TraceInputError, summarize
from vllm_ops.traces.cli import main

DECODE = "execute_context_0(0)_generation_1(1)"


def _events(ev):
    """Two decode steps of one kernel each, with their CPU and GPU annotations."""
    out = []
    for k, t in enumerate((0.0, 1000.0)):
        out += [ev.span(DECODE, t, 500.0, cat="user_annotation"), ev.span(DECODE, t + 100.0, 300.0),
                ev.kernel("nvjet_x", t + 100.0, 300.0, corr=10 + k),
                ev.runtime("cudaLaunchKernel", t + 10.0, 5.0, 10 + k)]
    return out


def _write(path, doc, gz=True):
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return str(path)


@pytest.mark.parametrize("doc", [{"traceEvents": []}, [], {"traceEvents": [], "distributedInfo": {"rank": 0}}],
                         ids=["empty-array", "bare-empty-array", "with-info"])
def test_an_empty_capture_is_an_error_that_says_so(tmp_path, doc, capsys):
    path = _write(tmp_path / "rank0.pt.trace.json.gz", doc)
    with pytest.raises(TraceInputError) as exc:
        summarize([path])
    msg = str(exc.value)
    assert msg.startswith(path) and "the profiler wrote no events" in msg
    assert "started and stopped more than once" in msg and "capture again" in msg
    assert "CPU-only" not in msg
    assert main([path]) == 2
    assert "the profiler wrote no events" in capsys.readouterr().err


def test_a_capture_of_metadata_only_is_empty(tmp_path, write_trace):
    meta = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "python"}},
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}]
    path = write_trace("rank0.pt.trace.json.gz", meta)
    with pytest.raises(TraceInputError, match="wrote no events but 2 metadata events"):
        summarize([path])


@pytest.mark.parametrize(("value", "kind"), [({}, "an object"), ({"a": [1]}, "an object"), ("x", "a string"),
                                             (3, "a number"), (None, "null")])
def test_trace_events_that_is_no_array_is_an_error(tmp_path, value, kind):
    path = _write(tmp_path / "rank0.pt.trace.json.gz", {"traceEvents": value})
    with pytest.raises(TraceInputError, match=f"traceEvents is {kind}, not an array of events"):
        summarize([path])


def test_a_bare_array_of_events_is_a_trace(tmp_path, ev):
    events = _events(ev)
    as_object = summarize([_write(tmp_path / "a_rank0.json.gz", {"traceEvents": events})])
    bare = summarize([_write(tmp_path / "b_rank0.json", events, gz=False)])
    (got,), (want,) = bare["ranks"], as_object["ranks"]
    assert got["decode_steps"] == want["decode_steps"] == 2
    assert [s["busy_ms"] for s in got["steps"]] == [s["busy_ms"] for s in want["steps"]] == [0.3, 0.3]
    assert got["parser"] == "general"


def test_a_directory_skips_json_that_is_no_trace_and_says_so(tmp_path, ev):
    d = tmp_path / "run"
    d.mkdir()
    _write(d / "config.json", {"hidden_size": 7168, "num_hidden_layers": 61}, gz=False)
    trace = _write(d / "trace.json.gz", {"traceEvents": _events(ev)})
    s = summarize([str(d)])
    assert [r["file"] for r in s["ranks"]] == [trace]
    (skip,) = s["inputs"]["skipped"]
    assert skip["file"] == str(d / "config.json") and skip["why"].startswith("not a Chrome trace")
    assert any(w.startswith(f"skipped {d / 'config.json'}: not a Chrome trace") for w in s["warnings"])
    # given by name, the same file is an error
    with pytest.raises(TraceInputError, match="no traceEvents array"):
        summarize([str(d / "config.json")])


def test_a_directory_of_no_trace_at_all_is_an_error(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    _write(d / "config.json", {"hidden_size": 7168}, gz=False)
    with pytest.raises(TraceInputError, match=r"no rank trace to read: .*config\.json: not a Chrome trace"):
        summarize([str(d)])


def test_every_file_a_directory_of_rank_traces_skips_is_said(tmp_path, write_trace, ev):
    d = tmp_path / "ranks"
    write_trace("tp1_rank0.pt.trace.json.gz", _events(ev), directory=d)
    other = write_trace("worker.json.gz", _events(ev), directory=d)
    s = summarize([str(d)])
    assert any(w.startswith(f"skipped {other}: not a rank trace") for w in s["warnings"])


# ------------------------------------------------------------------ the command's options

def _one_trace(tmp_path, ev, info=True):
    doc = {"traceEvents": _events(ev)}
    if info:
        doc["distributedInfo"] = {"rank": 0, "world_size": 2}
    return _write(tmp_path / "tp2_rank0.pt.trace.json.gz", doc)


@pytest.mark.parametrize(("argv", "flag"), [(["--top", "-1"], "--top"), (["--jobs", "0"], "--jobs"),
                                            (["--tokens", "-3"], "--tokens"), (["--key-tokens", "-1"], "--key-tokens"),
                                            (["--tensor-parallel-size", "0"], "--tensor-parallel-size")])
def test_a_bad_option_is_named_by_its_flag(tmp_path, ev, capsys, argv, flag):
    path = _one_trace(tmp_path, ev)
    assert main([path, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vllm-trace-summary: error: {flag} must be at least ")
    assert ": top must" not in err and ": jobs must" not in err  # the library's parameter names


def test_a_checkpoint_without_a_tensor_parallel_size_names_the_flag(tmp_path, ev, capsys):
    path = _one_trace(tmp_path, ev, info=False)
    record = _write(tmp_path / "checkpoint.json", {"tool": "x"}, gz=False)
    assert main([path, "--checkpoint", record]) == 2  # a bad record is refused first
    capsys.readouterr()
    from vllm_ops_host import checkpoint as ckpt

    good = _write(tmp_path / "record.json", {"tool": ckpt.TOOL, "schema": ckpt.SCHEMA, "error": "not read"}, gz=False)
    assert main([path, "--checkpoint", good]) == 2
    err = capsys.readouterr().err
    assert "--tensor-parallel-size N" in err and "got None" not in err
    assert main([path, "--checkpoint", good, "--tensor-parallel-size", "1"]) == 0


def test_a_missing_checkpoint_is_said_to_be_missing(tmp_path, ev, capsys):
    path = _one_trace(tmp_path, ev)
    assert main([path, "--checkpoint", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no such file or directory" in err and "not a directory" not in err


def test_a_tensor_parallel_size_the_traces_contradict_is_refused(tmp_path, ev, capsys):
    path = _one_trace(tmp_path, ev)  # world size 2
    assert main([path, "--tensor-parallel-size", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vllm-trace-summary: error: --tensor-parallel-size 4 contradicts the traces")
    with pytest.raises(TraceInputError, match="world size of 2"):
        summarize([path], SummaryOptions(context={"tensor_parallel_size": 3}))
    s = summarize([path], SummaryOptions(context={"tensor_parallel_size": 1}))
    assert any(w.startswith("tensor-parallel size 1 given, the traces' world size is 2") for w in s["warnings"])


def test_the_help_says_where_the_tensor_parallel_size_comes_from(capsys):
    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "a trace without one gives none, and --checkpoint then needs this" in out


def test_a_tensor_parallel_size_that_does_not_split_the_heads_is_refused_by_its_flag(tmp_path, ev, capsys):
    from vllm_ops_host import checkpoint as ckpt

    path = _one_trace(tmp_path, ev, info=False)
    heads = {"tool": ckpt.TOOL, "schema": ckpt.SCHEMA, "error": None, "model": {"num_attention_heads": 6},
             "routed_experts": {"layers": []}}
    record = _write(tmp_path / "record.json", heads, gz=False)
    assert main([path, "--checkpoint", record, "--tensor-parallel-size", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vllm-trace-summary: error: --tensor-parallel-size 4 contradicts the model: its "
                          "config.json gives 6 attention heads")
