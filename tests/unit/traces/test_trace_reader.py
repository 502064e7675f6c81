import gzip
import json
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, TraceInputError, reader, summarize
from vllm_ops.traces.annotations import StepMatcher, StepName
from vllm_ops.traces.reader import Span, find_trace_files, normalize_annotation, rank_from_filename, read_trace

MATCHER = StepMatcher(decode_pattern=r"^decode_step$")
DECODE = StepName("pattern", "decode")


def _events(ev):
    return [
        ev.cpu_op("aten::mm", 1.0, 5.0),
        ev.runtime("cudaLaunchKernel", 1.5, 1.0, corr=11),
        ev.kernel("nvjet_sm90_tst_64x8", 10.0, 4.0, corr=11),
        ev.kernel('weird "quoted" \\ name', 15.0, 1.5, corr=12),
        ev.kernel("Memcpy DtoD (Device -> Device)", 17.0, 0.5, corr=13, cat="gpu_memcpy"),
        ev.kernel("Memset (Device)", 18.0, 0.25, corr=14, cat="gpu_memset"),
        ev.runtime("cudaGraphLaunch", 19.0, 1.0, corr=20),
        ev.span("decode_step", 9.0, 20.0),
        ev.span("nccl:all_reduce", 12.0, 1.0),
        ev.span("decode_step", 1.0, 2.0, cat="user_annotation"),
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]


def _fingerprint(d):
    return (d.rank, d.world_size, d.devices, d.names, d.name_cats, d.activities, d.kernels, d.gpu_spans, d.cpu_spans,
            d.acts.tolist(), d.launches.tolist(), d.graph_launches, d.collective_args, d.process_groups,
            dict(d.gpu_annotation_names), dict(d.cpu_annotation_names), dict(d.activity_pids), d.bad_events)


def _keep_nvjet(name, cat):
    return name.startswith("nvjet")


@pytest.mark.parametrize("gz", [True, False])
def test_fast_and_general_paths_agree(write_trace, ev, gz):
    path = write_trace("r.json.gz" if gz else "r.json", _events(ev), rank=3, world_size=4, gz=gz)
    fast = read_trace(path, MATCHER, parser="fast", keep_calls=_keep_nvjet)
    general = read_trace(path, MATCHER, parser="general", keep_calls=_keep_nvjet)
    assert fast.parser == "fast" and general.parser == "general"
    assert _fingerprint(fast) == _fingerprint(general)
    assert fast.rank == 3 and fast.world_size == 4 and fast.devices == {0: "Test GPU"}
    assert fast.names[1] == 'weird "quoted" \\ name'
    assert fast.name_cats == ["kernel", "kernel", "gpu_memcpy", "gpu_memset"]
    assert fast.activities == 4 and fast.kernels == 2
    # only the spans the matcher recognizes, with their External id (2, from ev.span)
    assert fast.cpu_spans == [Span(1.0, 2.0, "decode_step", DECODE, 2)]
    assert fast.gpu_spans == [Span(9.0, 20.0, "decode_step", DECODE, 2)]
    # every GPU activity, in file order: ts, dur, name id, correlation
    assert fast.acts.tolist() == [(10.0, 4.0, 0, 11), (15.0, 1.5, 1, 12), (17.0, 0.5, 2, 13), (18.0, 0.25, 3, 14)]
    assert fast.acts.dtype.itemsize == 28 and fast.launches.dtype.itemsize == 16
    # the launch calls on the host (the cpu_op is not one), graph launches also apart
    assert fast.launches.tolist() == [(1.5, 11), (19.0, 20)]
    assert fast.graph_launches == [(19.0, 20)]
    assert fast.graph_launch_corr == [20] and fast.graph_launches_without_activity == 1
    # keep_calls selected the nvjet kernel (row 0): it records no collective arguments
    assert fast.collective_args == {0: (None, None, None)}
    assert fast.gpu_annotation_names == {"decode_step": 1, "nccl:all_reduce": 1}
    assert fast.cpu_annotation_names == {"decode_step": 1}


@pytest.mark.parametrize("parser", ["fast", "general"])
def test_collective_arguments_and_process_groups(write_trace, ev, tmp_path, parser):
    nccl = ev.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 3.0, 1.0, corr=5)
    nccl["args"].update({"Collective name": "allreduce", "In msg nelems": 7168, "Out msg nelems": 7168,
                         "dtype": "BFloat16", "Process Group Name": "0"})
    events = [ev.kernel("nvjet_x", 1.0, 1.0, corr=4), nccl, ev.span("decode_step", 0.0, 9.0)]
    doc = {"distributedInfo": {"rank": 1, "world_size": 2,
                               "pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]},
                                             {"pg_name": "5", "pg_size": 1, "ranks": [1]}]},
           "traceEvents": events}
    path = tmp_path / "c.json"
    path.write_text(ev.render(doc))
    data = read_trace(str(path), MATCHER, parser=parser, keep_calls=lambda name, cat: "AllReduce" in name)
    assert data.collective_args == {1: (7168, "BFloat16", "0")}
    assert data.process_groups == {"0": 2, "5": 1}


def test_graph_launch_whose_kernel_was_recorded(write_trace, ev):
    events = [ev.runtime("cudaGraphLaunch", 1.0, 1.0, corr=5), ev.kernel("k", 3.0, 1.0, corr=5),
              ev.runtime("cudaGraphLaunch", 4.0, 1.0, corr=6), ev.span("decode_step", 0.0, 9.0)]
    path = write_trace("g.json.gz", events)
    for parser in ("fast", "general"):
        data = read_trace(path, MATCHER, parser=parser)
        assert data.graph_launches == [(1.0, 5), (4.0, 6)] and data.acts["corr"].tolist() == [5]
        assert data.graph_launches_without_activity == 1


def test_graph_launch_written_after_its_kernel(write_trace, ev):
    # The activities are attributed once the whole file is read, so the order of a launch
    # and its kernels in the file does not matter.
    events = [ev.kernel("k", 3.0, 1.0, corr=5), ev.kernel("k", 5.0, 1.0), ev.span("decode_step", 0.0, 9.0),
              ev.runtime("cudaGraphLaunch", 1.0, 1.0, corr=5), ev.runtime("cudaGraphLaunch", 4.0, 1.0, corr=6)]
    path = write_trace("late.json.gz", events)
    for parser in ("fast", "general"):
        data = read_trace(path, MATCHER, parser=parser)
        assert data.graph_launch_corr == [5, 6] and data.graph_launches_without_activity == 1
        assert data.acts["corr"].tolist() == [5, -1]  # -1: no correlation recorded
        s = summarize([path], SummaryOptions(decode_pattern="^decode_step$", parser=parser))
        (step,) = s["ranks"][0]["steps"]
        # no CPU annotation: the step's graph launches are those its activities' correlations name
        assert step["activities"] == 2 and step["graph_launches"] == 1


def test_correlation_id_beyond_64_bits_is_bad_input(write_trace, ev):
    path = write_trace("huge.json.gz", [ev.kernel("k", 3.0, 1.0, corr=2**64), ev.span("decode_step", 0.0, 9.0)])
    with pytest.raises(TraceInputError, match=r"huge.json.gz: a correlation id is beyond 64 bits"):
        read_trace(path, MATCHER, parser="fast")
    with pytest.raises(TraceInputError, match=r"huge.json.gz: invalid JSON: .*integer overflow"):  # yajl's own limit
        read_trace(path, MATCHER, parser="general")


def test_overlapping_spans_are_all_kept_and_the_latest_starting_one_holds_an_activity(write_trace, ev):
    # The reader keeps every step span; attribution is the timeline's: of overlapping spans,
    # an activity belongs to the one that started last (and holds its start).
    events = [ev.kernel("k", 5.0, 1.0), ev.kernel("k", 12.0, 2.0), ev.kernel("k", 30.0, 4.0),
              ev.span("decode_step", 0.0, 10.0), ev.span("decode_step", 4.0, 10.0), ev.span("decode_step", 20.0, 1.0)]
    path = write_trace("o.json.gz", events)
    for parser in ("fast", "general"):
        data = read_trace(path, MATCHER, parser=parser)
        assert [(s.ts, s.dur) for s in data.gpu_spans] == [(0.0, 10.0), (4.0, 10.0), (20.0, 1.0)]
        s = summarize([path], SummaryOptions(decode_pattern="^decode_step$", parser=parser))
        r = s["ranks"][0]
        assert [st["activities"] for st in r["steps"]] == [0, 2, 0]
        assert r["steps"][1]["kernel_ms"] == pytest.approx(0.003)
        assert r["steps"][1]["window_ms"] == pytest.approx(0.009)  # 5 .. 14 us
        assert r["cuda_ms_per_step"] == pytest.approx(0.003 / 3)  # the kernel at 30 is in no step
        assert any("1 step spans overlap the one before" in w and "latest-starting span" in w
                   for w in s["warnings"])


def test_minified_layout_uses_the_general_parser(write_trace, ev):
    torch_path = write_trace("a.json.gz", _events(ev), rank=1, world_size=2)
    other_path = write_trace("b.json.gz", _events(ev), rank=1, world_size=2, layout="minified")
    other = read_trace(other_path, MATCHER)
    assert other.parser == "general"
    assert _fingerprint(other) == _fingerprint(read_trace(torch_path, MATCHER))
    with pytest.raises(TraceInputError, match="not in torch's exporter layout"):
        read_trace(other_path, MATCHER, parser="fast")


@pytest.mark.parametrize("layout", ["pretty", "indent"])
def test_one_key_per_line_layouts_take_the_fast_path(write_trace, ev, layout):
    # torch 2.13's exporter (vLLM 0.32) writes one key per line; json.dump(indent=4) of a
    # torch trace keeps torch's key order. parser="fast" raises where it would fall back.
    torch_path = write_trace("a.json.gz", _events(ev), rank=1, world_size=2)
    other_path = write_trace("b.json.gz", _events(ev), rank=1, world_size=2, layout=layout)
    other = read_trace(other_path, MATCHER, parser="fast", keep_calls=_keep_nvjet)
    assert other.parser == "fast"
    assert _fingerprint(other) == _fingerprint(read_trace(torch_path, MATCHER, keep_calls=_keep_nvjet))
    assert read_trace(other_path, MATCHER).parser == "fast"


@pytest.mark.parametrize("layout", ["torch", "pretty"])
def test_one_odd_event_sends_the_whole_file_to_the_general_parser(tmp_path, ev, layout):
    doc = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": _events(ev)}
    text = ev.render(doc, layout)
    # Re-lay one kernel with its keys in another order: the fast regex misses it, the count check sees it.
    odd = '  {"cat": "kernel", "ph": "X", "name": "hidden", "pid": 0, "tid": 7, "ts": 30.0, "dur": 2.0}'
    at = text.rindex("  {\n")  # before the last event: the first one sets the layout
    text = text[:at] + odd + ",\n" + text[at:]
    path = tmp_path / "odd.json"
    path.write_text(text)
    with pytest.raises(TraceInputError, match="laid out differently"):
        read_trace(str(path), MATCHER, parser="fast")
    data = read_trace(str(path), MATCHER)
    assert data.parser == "general"
    assert "hidden" in data.names


@pytest.mark.parametrize("layout", ["torch", "pretty", "indent"])
def test_small_chunks_cut_between_events(write_trace, ev, monkeypatch, layout):
    events = []
    for i in range(200):
        events.append(ev.kernel(f"k{i % 7}", 100.0 + i, 0.5, corr=i))
        events.append(ev.cpu_op("aten::add", 100.0 + i, 0.1))
    events.append(ev.span("decode_step", 99.0, 300.0))
    path = write_trace("chunks.json.gz", events, layout=layout)
    whole = read_trace(path, MATCHER, parser="fast")
    monkeypatch.setattr(reader, "CHUNK", 97)
    small = read_trace(path, MATCHER, parser="fast")
    assert _fingerprint(small) == _fingerprint(whole)
    assert small.activities == 200


def test_distributed_info_after_the_events_is_found(tmp_path, ev):
    text = ('{"traceEvents": [' + ",".join(json.dumps(e) for e in _events(ev)) +
            '], "distributedInfo": {"rank": 5, "world_size": 8, "pg_config": [{"ranks": [0, 1]}, '
            '{"pg_name": "3", "pg_size": 8}]}}')
    path = tmp_path / "tail.json"
    path.write_text(text)
    data = read_trace(str(path), MATCHER)
    assert (data.rank, data.world_size) == (5, 8)
    assert data.process_groups == {"3": 8}  # a group without pg_size is not one


def test_rank_from_file_name():
    assert rank_from_filename("/x/dp0_pp0_tp3_dcp0_ep0_rank3.1712.pt.trace.json.gz") == 3
    assert rank_from_filename("/x/tp2_rank1.pt.trace.json.gz") == 1
    assert rank_from_filename("/x/trace.json") is None


def test_normalize_annotation_collapses_digits():
    assert normalize_annotation("execute_context_1(888_788544)_generation_0(0)") == \
        "execute_context_N(N_N)_generation_N(N)"


def test_find_trace_files_expands_directories(tmp_path):
    (tmp_path / "b_rank1.pt.trace.json.gz").write_bytes(b"x")
    (tmp_path / "a_rank0.json").write_bytes(b"x")
    (tmp_path / "notes.txt").write_bytes(b"x")
    assert [p.rsplit("/", 1)[1] for p in find_trace_files(str(tmp_path))] == \
        ["a_rank0.json", "b_rank1.pt.trace.json.gz"]


# ----------------------------------------------------------------------------- bad input

def test_truncated_gzip(write_trace, ev, tmp_path):
    good = Path(write_trace("whole.json.gz", _events(ev) * 50)).read_bytes()
    cut = tmp_path / "cut_rank0.json.gz"
    cut.write_bytes(good[: len(good) // 2])
    for parser in ("auto", "general"):
        with pytest.raises(TraceInputError, match=r"cut_rank0.json.gz: truncated gzip"):
            read_trace(str(cut), MATCHER, parser=parser)


@pytest.mark.parametrize("gz", [True, False])
def test_invalid_json(tmp_path, gz):
    path = tmp_path / ("bad.json.gz" if gz else "bad.json")
    text = b'{"traceEvents": [{"ph": "X", "cat": "kernel", oops}]}'
    path.write_bytes(gzip.compress(text) if gz else text)
    with pytest.raises(TraceInputError, match=r"bad.json(.gz)?: invalid JSON"):
        read_trace(str(path), MATCHER)


def test_truncated_plain_json(write_trace, ev, tmp_path):
    text = Path(write_trace("t.json", _events(ev), gz=False)).read_bytes()
    path = tmp_path / "half.json"
    path.write_bytes(text[: len(text) // 2])
    with pytest.raises(TraceInputError, match=r"half.json: (truncated|invalid) JSON"):
        read_trace(str(path), MATCHER)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json.gz"
    path.write_bytes(b"")
    with pytest.raises(TraceInputError, match=r"empty.json.gz: empty file"):
        read_trace(str(path), MATCHER)


def test_gzip_of_nothing(tmp_path):
    path = tmp_path / "nothing.json.gz"
    path.write_bytes(gzip.compress(b""))
    with pytest.raises(TraceInputError, match=r"nothing.json.gz: empty file"):
        read_trace(str(path), MATCHER)


def test_json_that_is_not_a_trace(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model": "x"}')
    with pytest.raises(TraceInputError, match=r"config.json: no traceEvents array"):
        read_trace(str(path), MATCHER)


def test_not_gzip_despite_the_name_is_read_as_json(tmp_path):
    path = tmp_path / "plain.json.gz"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, '
                    '"dur": 2.0, "args": {}}]}')
    assert read_trace(str(path), MATCHER).activities == 1
    path.write_text('{"traceEvents": []}')  # read as JSON too: an empty capture (issue 30)
    with pytest.raises(TraceInputError, match="the profiler wrote no events"):
        read_trace(str(path), MATCHER)


def test_empty_directory_and_missing_path(tmp_path):
    with pytest.raises(TraceInputError, match="directory holds no trace files"):
        find_trace_files(str(tmp_path))
    with pytest.raises(TraceInputError, match="no such file or directory"):
        find_trace_files(str(tmp_path / "nope"))
    with pytest.raises(TraceInputError, match="no trace paths given"):
        find_trace_files([])


def test_unknown_parser_name(write_trace, ev):
    with pytest.raises(TraceInputError, match="unknown parser"):
        read_trace(write_trace("x.json.gz", _events(ev)), MATCHER, parser="turbo")


LAUNCHES = ["cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaGraphLaunch", "hipLaunchKernel",
            "hipGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync"]
NOT_LAUNCHES = ["cudaEventRecord", "cudaStreamWaitEvent", "cudaStreamIsCapturing", "cudaGetDevice"]
ODD = ["cudaMemcpy2D", "cudaMemcpyToSymbol", "hipMemcpyDtoHAsync", "cudaLaunchHostFunc"]  # whatever the reader says


@pytest.mark.parametrize("layout", ["torch", "pretty", "minified"])
def test_launch_calls_are_the_same_for_both_parsers(write_trace, ev, layout):
    names = LAUNCHES + NOT_LAUNCHES + ODD
    events = [ev.runtime(n, float(i), 0.5, corr=100 + i) for i, n in enumerate(names)]
    events.append(ev.kernel("k", 50.0, 1.0, corr=100))
    path = write_trace("l.json.gz", events, layout=layout)
    general = read_trace(path, MATCHER, parser="general")
    other = read_trace(path, MATCHER)
    assert other.launches.tolist() == general.launches.tolist()
    assert other.graph_launches == general.graph_launches == [(3.0, 103), (5.0, 105)]
    kept = {int(c) - 100 for c in general.launches["corr"]}
    assert {names[i] for i in kept} >= set(LAUNCHES)
    assert not {names[i] for i in kept} & set(NOT_LAUNCHES)


@pytest.mark.parametrize("call", ["hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync", "cudaMemcpy2D", "cudaMemcpyToSymbol",
                                  "cudaMemcpyPeer"])
def test_every_copy_call_is_a_launch_call(write_trace, ev, call):
    events = [ev.span("decode_step", 0.0, 10.0, cat="user_annotation"), ev.runtime(call, 2.0, 1.0, corr=7),
              ev.kernel("Memcpy HtoD (Pinned -> Device)", 4.0, 1.0, corr=7, cat="gpu_memcpy")]
    path = write_trace("copy.json.gz", events)
    for parser in ("fast", "general"):
        assert read_trace(path, MATCHER, parser=parser).launches.tolist() == [(2.0, 7)]


# torch 1.13's exporter (the V100 trace in tests/data/traces/public): the compact layout, but the
# args over several lines, "External id" on the first and the correlation further down.
_MULTILINE_ARGS = """{
  "schemaVersion": 1,
  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
  "traceEvents": [
  {
    "ph": "X", "cat": "user_annotation", "name": "decode_step", "pid": 9, "tid": 9,
    "ts": 0, "dur": 20,
    "args": {
      "External id": 1,"Trace name": "PyTorch Profiler", "Trace iteration": 0
    }
  },
  {
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9,
    "ts": 2, "dur": 3,
    "args": {
      "External id": 5,
      "cbid": 211, "correlation": 5
    }
  },
  {
    "ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
    "ts": 30, "dur": 4,
    "args": {
      "External id": 5,
      "queued": 0, "device": 0, "context": 1,
      "stream": 7, "correlation": 5,
      "registers per thread": 16
    }
  }
  ],
  "traceName": "x"
}"""


def test_args_over_several_lines_keep_their_correlation(tmp_path):
    path = tmp_path / "multiline.json"
    path.write_text(_MULTILINE_ARGS)
    general = read_trace(str(path), MATCHER, parser="general")
    assert general.acts["corr"].tolist() == [5] and general.launches.tolist() == [(2.0, 5)]
    fast = read_trace(str(path), MATCHER, parser="fast")
    assert fast.acts["corr"].tolist() == [5] and fast.launches.tolist() == [(2.0, 5)]
