"""Traces without GPU kernels: a real vLLM CPU-backend trace, and a CPU rank beside a GPU rank.

The issue: "CPU traces have no GPU kernels: the summary must say so plainly rather than print
zeros as if they were measurements". GPU figures are null, the markers say why, the steps the
CPU annotations show are still counted, and no zero of an unmeasured rank is averaged in.
"""

import gzip
import json
import shutil
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, summarize, to_markdown
from vllm_ops.traces.annotations import StepMatcher
from vllm_ops.traces.cli import main
from vllm_ops.traces.reader import read_trace

CPU_TRACE = Path(__file__).parent / "data" / "rank0.1796013877177788456.pt.trace.json.gz"
STEP = "execute_context_0(0)_generation_1(1)"
NOT_MEASURED = "no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not measured"
GPU_FIGURES = ("cuda_ms_per_step", "allreduce_ms_per_step", "allreduce_share", "allreduce_nccl_ms_per_step",
               "allreduce_calls_per_step")


def _by_hand():
    """The CPU trace read plainly: categories present, and the decode annotations."""
    events = json.loads(gzip.decompress(CPU_TRACE.read_bytes()))["traceEvents"]
    cats = {e.get("cat") for e in events}
    decode = [e["dur"] for e in events if e.get("cat") == "user_annotation" and e["name"] == STEP]
    return cats, decode


@pytest.fixture(scope="module")
def cpu_summary():
    return summarize([str(CPU_TRACE)])


def test_the_fixture_is_a_cpu_only_trace():
    cats, decode = _by_hand()
    assert not cats & {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
    assert len(decode) == 15


def test_cpu_trace_markers_and_null_figures(cpu_summary):
    s = cpu_summary
    assert s["gpu_time_measured"] is False and s["ranks_without_gpu_kernels"] == [0]
    (r,) = s["ranks"]
    assert r["gpu_kernels"] == 0 and r["gpu_time_measured"] is False
    for key in GPU_FIGURES:
        assert r[key] is None, key
    assert r["categories"] == {} and r["top_kernels"] == [] and r["device"] is None
    ar = s["allreduce"]
    assert ar["share_mean"] is None and ar["ms_per_step_mean"] is None and ar["ms_per_step_skew_corrected"] is None
    assert ar["share_by_rank"] == {} and ar["ms_per_step_by_rank"] == {}


def test_cpu_trace_decode_steps_are_counted_from_the_cpu_annotations(cpu_summary):
    _, decode = _by_hand()
    (r,) = cpu_summary["ranks"]
    # 15 decode steps; the empty execute_context_0(0)_generation_0(0) step at the end is not one
    assert r["decode_steps"] == 15 and r["steps_from"] == "user_annotation"
    assert r["step_wall_ms_per_step"] == pytest.approx(sum(decode) / 15 / 1000, abs=1e-4)
    (p,) = cpu_summary["prefill"]
    assert p["prefill_steps"] == 1 and p["gpu_time_measured"] is False and p["cuda_ms_per_step"] is None


def test_cpu_trace_json_says_null_not_zero(cpu_summary):
    text = json.dumps(cpu_summary)
    for key in GPU_FIGURES:
        assert f'"{key}": null' in text and f'"{key}": 0' not in text
    assert '"gpu_time_measured": false' in text and '"gpu_kernels": 0' in text


def test_cpu_trace_warning(cpu_summary):
    assert cpu_summary["warnings"] == [
        f"rank 0 ({CPU_TRACE.name}): {NOT_MEASURED}; its GPU figures are null, not zero; its 15 decode steps "
        "are counted from the CPU annotations (user_annotation)."
    ]


def test_the_reader_keeps_cpu_steps_and_counts_no_kernel():
    _, decode = _by_hand()
    data = read_trace(str(CPU_TRACE), StepMatcher(decode_pattern=r"^execute_context_0\(0\)_generation_[1-9]"))
    assert data.kernels == 0 and data.activities == 0 and data.gpu_spans == [] and len(data.acts) == 0
    assert [s.dur for s in data.cpu_spans if s.step.phase == "decode"] == decode


def test_both_parsers_keep_cpu_steps_alike(write_trace, ev):
    events = [*_cpu_events(ev), ev.kernel("nvjet_x", 70.0, 2.0), ev.kernel("Memset (Device)", 80.0, 1.0,
                                                                              cat="gpu_memset")]
    path = write_trace("r0.json.gz", events)
    fast = read_trace(path, parser="fast")  # the default matcher: vLLM's annotation families
    general = read_trace(path, parser="general")
    assert fast.parser == "fast"
    assert (fast.kernels, fast.activities, fast.cpu_spans) == (general.kernels, general.activities, general.cpu_spans)
    assert fast.kernels == 1 and fast.activities == 2
    assert [(s.ts, s.dur, s.name, s.step.phase) for s in fast.cpu_spans] == [(0.0, 50.0, STEP, "decode"),
                                                                           (60.0, 30.0, STEP, "decode")]


def test_cli_json_exit_0_and_a_plain_warning_on_stderr(capsys):
    assert main([str(CPU_TRACE)]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["ranks"][0]["cuda_ms_per_step"] is None and out["ranks"][0]["decode_steps"] == 15
    assert captured.err == f"vllm-trace-summary: warning: rank 0: {NOT_MEASURED}\n"


def test_cli_markdown_says_not_measured_instead_of_a_table_of_zeros(capsys):
    assert main([str(CPU_TRACE), "--format", "markdown"]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert f"Rank 0: {NOT_MEASURED}.\n" in out
    assert "| rank | steps | step wall ms | steps found in |" in out
    assert "| 0 | 15 | 2.679 | CPU annotations |" in out
    assert "GPU time not measured on rank 0 (no GPU kernel events)." in out  # the prefill section
    # no verdict, no GPU table, no percentages, no zero figures
    assert "## Verdict" not in out and "decomposed" not in out
    assert "CUDA ms/step" not in out and "%" not in out and "0.000" not in out
    assert "All-reduce across ranks" not in out and "Top kernels" not in out
    assert "vllm-trace-summary: warning: rank 0:" in captured.err


def _gpu_events(ev, allreduce_us):
    return [ev.span(STEP, 0.0, 100.0), ev.kernel("nvjet_x", 1.0, 4.0),
            ev.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 10.0, allreduce_us)]


def _cpu_events(ev):
    return [ev.span(STEP, 0.0, 50.0, cat="user_annotation"), ev.cpu_op("aten::mm", 1.0, 20.0),
            ev.span(STEP, 60.0, 30.0, cat="user_annotation")]


@pytest.fixture
def mixed(write_trace, ev, tmp_path):
    """Rank 0 and 2 ran on GPUs (all-reduce shares 60% and 75%), rank 1 recorded no GPU kernel."""
    write_trace("r0.json.gz", _gpu_events(ev, 6.0), rank=0, world_size=3)
    write_trace("r1.json.gz", _cpu_events(ev), rank=1, world_size=3)
    write_trace("r2.json.gz", _gpu_events(ev, 12.0), rank=2, world_size=3)
    return summarize([str(tmp_path)], SummaryOptions(jobs=1))


def test_mixed_ranks_leave_the_kernel_less_rank_out(mixed):
    s = mixed
    assert s["gpu_time_measured"] is True and s["ranks_without_gpu_kernels"] == [1]
    r0, r1, r2 = s["ranks"]
    assert (r0["gpu_time_measured"], r1["gpu_time_measured"], r2["gpu_time_measured"]) == (True, False, True)
    assert r0["gpu_kernels"] == 2 and r1["gpu_kernels"] == 0
    assert r1["decode_steps"] == 2 and r1["steps_from"] == "user_annotation"
    assert r1["step_wall_ms_per_step"] == 0.04
    for key in GPU_FIGURES:
        assert r1[key] is None, key
    assert r0["steps_from"] == "gpu_user_annotation"
    ar = s["allreduce"]
    assert ar["share_by_rank"] == {"0": 0.6, "2": 0.75}  # no "1": 0.0
    assert ar["share_mean"] == 0.675  # (0.6 + 0.75) / 2, not / 3
    assert ar["ms_per_step_mean"] == 0.009
    assert set(ar["wait_ms_per_step_by_rank"]) == {"0", "2"} and ar["calls_matched"] == 1
    assert ("1 of the 3 ranks (rank 1) has no GPU kernel events in its trace: GPU time and all-reduce share not "
            "measured there, so the group-wide figures (all-reduce means, skew correction) cover only ranks 0, 2."
            ) in s["warnings"]
    assert any(w.startswith(f"rank 1 (r1.json.gz): {NOT_MEASURED}") for w in s["warnings"])
    assert any("different decode step counts (rank 0: 1, rank 1: 2, rank 2: 1)" in w for w in s["warnings"])


def test_mixed_ranks_markdown(mixed):
    text = to_markdown(mixed)
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert any(line.startswith("| 0 | Test GPU | 1 | 0.010 |") and "| 60.0% |" in line for line in rows)
    assert any(line.startswith("| 2 | Test GPU | 1 | 0.016 |") and "| 75.0% |" in line for line in rows)
    assert not any(line.startswith("| 1 | Test GPU") or line.startswith("| 1 | - |") for line in rows)
    assert f"Rank 1: {NOT_MEASURED}; left out of the figures above." in text
    assert "| 1 | 2 | 0.040 | CPU annotations |" in text
    assert "| mean share of CUDA time | 67.5% |" in text
    assert "| left out: no GPU kernel events (not measured) | rank 1 |" in text
    assert "| category | rank 0 | rank 2 |" in text  # no column of dashes for rank 1


def test_memory_copies_alone_are_not_a_measurement(write_trace, ev):
    events = [ev.span(STEP, 0.0, 100.0), ev.kernel("Memcpy HtoD (Pageable -> Device)", 1.0, 4.0, cat="gpu_memcpy")]
    s = summarize([write_trace("r0.json.gz", events)])
    r = s["ranks"][0]
    assert r["gpu_kernels"] == 0 and r["gpu_time_measured"] is False and r["cuda_ms_per_step"] is None
    assert r["decode_steps"] == 1 and r["steps_from"] == "gpu_user_annotation"
    assert any("(1 memory copies or sets are all the GPU activity it recorded)" in w for w in s["warnings"])


def test_cpu_trace_without_matching_annotations_names_the_cpu_ones(tmp_path):
    path = tmp_path / CPU_TRACE.name
    shutil.copy(CPU_TRACE, path)
    s = summarize([str(path)], SummaryOptions(decode_pattern="^decode_step$"))
    r = s["ranks"][0]
    assert r["decode_steps"] == 0 and r["gpu_time_measured"] is False
    # the prefill step (the default families still find it) is the rank's only step
    assert [st["phase"] for st in r["steps"]] == ["prefill"]
    (w,) = [w for w in s["warnings"] if "no decode steps match" in w]
    assert "CPU annotation names seen: execute_context_N(N)_generation_N(N) x17." in w
    assert "no GPU projection" not in w  # nothing to project: there is no GPU kernel to attribute


def test_the_real_vllm_032_trace_takes_the_fast_path():
    # torch 2.13's exporter writes one key per line; parser="fast" raises where it would fall back.
    matcher = StepMatcher(decode_pattern=r"^execute_context_0\(0\)_generation_[1-9]")
    fast = read_trace(str(CPU_TRACE), matcher, parser="fast")
    general = read_trace(str(CPU_TRACE), matcher, parser="general")
    assert fast.parser == "fast" and read_trace(str(CPU_TRACE), matcher).parser == "fast"
    fields = ("rank", "world_size", "devices", "names", "activities", "kernels", "gpu_spans", "cpu_spans",
              "gpu_annotation_names", "cpu_annotation_names", "graph_launches", "collective_args", "bad_events")
    assert [getattr(fast, f) for f in fields] == [getattr(general, f) for f in fields]
    assert fast.acts.tolist() == general.acts.tolist() and fast.launches.tolist() == general.launches.tolist()
    assert len([s for s in fast.cpu_spans if s.step.phase == "decode"]) == len(_by_hand()[1]) > 0
    general = summarize([str(CPU_TRACE)], SummaryOptions(parser="general"))
    assert _without_parser(summarize([str(CPU_TRACE)])) == _without_parser(general)


def _without_parser(summary):
    """The summary less each rank's ``parser`` (which names the parser that read it)."""
    for r in summary["ranks"]:
        r.pop("parser")
    return summary
