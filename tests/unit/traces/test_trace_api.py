"""The summarizer's Python API, with the assertions the tests of the removed filters
(plugins/filter/vllm_trace.py, gone: vllm_trace_summary, vllm_trace_markdown, vllm_trace_topology)
made: the campaign's report reads the traces in Python now (vllm-campaign-report analyze)."""

import gzip
import json
from pathlib import Path

import pytest

from vllm_ops.records import RecordError
from vllm_ops.traces import SummaryOptions, TraceInputError, summarize, to_markdown
from vllm_ops.traces.topology import parse_topology

REPO = Path(__file__).resolve().parents[3]
STEP = "execute_context_0(0)_generation_1(1)"


def _write(path: Path, rank: int, world_size: int = 2, allreduce_us: float = 6.0) -> str:
    def x(cat, name, ts, dur):
        return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {}}

    doc = {"distributedInfo": {"rank": rank, "world_size": world_size}, "traceEvents": [
        x("gpu_user_annotation", STEP, 0.0, 100.0),
        x("kernel", "nvjet_sm90_tst", 1.0, 4.0),
        x("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 10.0, allreduce_us),
    ]}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return str(path)


def test_summary_of_a_directory_and_of_a_list(tmp_path):
    a = _write(tmp_path / "r0.json.gz", 0, allreduce_us=6.0)
    b = _write(tmp_path / "r1.json.gz", 1, allreduce_us=16.0)
    by_dir = summarize(str(tmp_path), SummaryOptions(jobs=1))
    assert by_dir == summarize([a, b], SummaryOptions(jobs=1))
    assert [r["rank"] for r in by_dir["ranks"]] == [0, 1]
    assert by_dir["allreduce"]["ms_per_step_skew_corrected"] == 0.006
    assert by_dir["allreduce"]["wait_ms_per_step_by_rank"] == {"0": 0.0, "1": 0.01}
    # what the playbook test checked, and the tables it wrote
    assert len(by_dir["ranks"]) == 2 and "| allreduce |" in to_markdown(by_dir)


def test_options_are_passed_through(tmp_path):
    path = _write(tmp_path / "r0.json.gz", 0, world_size=1)
    s = summarize(path, SummaryOptions(decode_pattern="^nothing$", top=1, categories={"mine": "nvjet"}))
    assert s["ranks"][0]["decode_steps"] == 0 and s["decode_pattern"] == "^nothing$"
    s = summarize(path, SummaryOptions(top=1, categories={"mine": "nvjet"}))
    assert s["ranks"][0]["categories"]["mine"]["ms_per_step"] == 0.004
    assert len(s["ranks"][0]["top_kernels"]) == 1


def test_markdown(tmp_path):
    s = summarize(_write(tmp_path / "r0.json.gz", 0, world_size=1))
    text = to_markdown(s)
    assert text.startswith("## Verdict\n") and "## Decode steps" in text and "| allreduce | 0.006 (60.0%) |" in text


@pytest.mark.parametrize(("name", "content", "message"), [
    (None, None, "directory holds no trace files"),
    ("missing.json.gz", None, "no such file or directory"),
    ("empty.json", b"", "empty.json: empty file"),
    ("bad.json", b"{nope", "bad.json: invalid JSON"),
    ("cut.json.gz", gzip.compress(b'{"traceEvents": [' * 50)[:30], "cut.json.gz: truncated gzip"),
])
def test_bad_input_raises_one_line(tmp_path, name, content, message):
    target = tmp_path if name is None else tmp_path / name
    if content is not None:
        target.write_bytes(content)
    with pytest.raises(TraceInputError, match=message):
        summarize(str(target))


def test_a_bad_decode_pattern():
    with pytest.raises(TraceInputError, match=r"^decode_pattern: invalid regular expression"):
        summarize("x", SummaryOptions(decode_pattern="("))


def test_keep_going(tmp_path):
    _write(tmp_path / "r0.json.gz", 0)
    (tmp_path / "r1.json.gz").write_bytes(b"")
    with pytest.raises(TraceInputError, match=r"r1\.json\.gz: empty file"):
        summarize(str(tmp_path))
    s = summarize(str(tmp_path), SummaryOptions(keep_going=True))
    assert [r["rank"] for r in s["ranks"]] == [0]


@pytest.mark.parametrize(("value", "message"), [("text", "a trace summary must be a JSON object, not str"),
                                              ({"ranks": {}}, "'ranks' must be a list, not dict")])
def test_markdown_rejects_what_is_not_a_summary(value, message):
    with pytest.raises(RecordError, match=f"the summary: {message}"):
        to_markdown(value)


TOPO_PCIE = ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
             "GPU0\t X \tPIX\tSYS\t0-47\t0\t\tN/A\nGPU1\tPIX\t X \tNODE\t0-47\t0\t\tN/A\n"
             "GPU2\tSYS\tNODE\t X \t48-95\t1\t\tN/A\n\nLegend:\n\n  X    = Self\n  NV#  = NVLinks\n")


@pytest.mark.parametrize(("text", "interconnect", "links"), [
    (TOPO_PCIE, "pcie", {"GPU0-GPU1": "PIX", "GPU0-GPU2": "SYS", "GPU1-GPU2": "NODE"}),
    (TOPO_PCIE.replace("PIX", "NV18").replace("SYS", "NV18").replace("NODE", "NV18"), "nvlink",
     {"GPU0-GPU1": "NV18", "GPU0-GPU2": "NV18", "GPU1-GPU2": "NV18"}),
    (TOPO_PCIE.replace("PIX", "NV4"), "mixed", {"GPU0-GPU1": "NV4", "GPU0-GPU2": "SYS", "GPU1-GPU2": "NODE"}),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", None, {}),
    (None, None, {}),
])
def test_topology(text, interconnect, links):
    topo = parse_topology(text)
    assert topo["interconnect"] == interconnect and topo["links"] == links
    assert topo["gpus"] == (3 if links else 0)


def test_context_reaches_the_advisor(tmp_path):
    # world size 8: a tensor-parallel size the traces contradict is refused (issue 30), not taken silently
    s = summarize(_write(tmp_path / "r0.json.gz", 0, world_size=8),
                  SummaryOptions(context={"interconnect": "pcie", "tensor_parallel_size": 8}))
    assert s["context"]["interconnect"] == "pcie" and s["context"]["sources"]["interconnect"] == "given"
    assert s["context"]["tensor_parallel_size"] == 8
    with pytest.raises(TraceInputError, match="context must be a mapping"):
        summarize(str(tmp_path / "r0.json.gz"), SummaryOptions(context="pcie"))


CPU_TRACE = REPO / "tests" / "unit" / "traces" / "data" / "rank0.1796013877177788456.pt.trace.json.gz"
CPU_NOT_MEASURED = "no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not measured"


def test_cpu_trace():
    s = summarize(str(CPU_TRACE))
    assert s["gpu_time_measured"] is False and s["ranks_without_gpu_kernels"] == [0]
    r = s["ranks"][0]
    assert r["gpu_kernels"] == 0 and r["decode_steps"] == 15
    assert r["cuda_ms_per_step"] is None and r["allreduce_share"] is None
    text = to_markdown(s)
    assert f"Rank 0: {CPU_NOT_MEASURED}." in text and "CUDA ms/step" not in text
