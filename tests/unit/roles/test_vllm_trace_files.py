"""The campaign's trace-finding module: which files in the trace directory belong to a campaign."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from ansible_collections.vllm_ops.serving.plugins.modules import vllm_trace_files as trace_files

PREFIX = "vllm-ops-20261130T045536Z"


def write_trace(path: Path, complete: bool = True) -> None:
    data = gzip.compress(b'{"traceEvents": []}')
    path.write_bytes(data if complete else data[:-6])


def find(directory: Path, ranks: int):
    """The module's find() with a clock that advances one second per poll."""
    ticks = iter(range(10**6))
    return trace_files.find(str(directory), PREFIX, ranks, timeout_s=5, poll_s=1,
                            clock=lambda: next(ticks), sleep=lambda _: None)


@pytest.mark.parametrize("rank_suffix", ["rank{r}", "dp0_pp0_tp{r}_dcp0_ep0_rank{r}"])
def test_traces_and_tables_as_vllm_names_them(tmp_path, rank_suffix):
    # As vLLM 0.32 writes them: rank{N} alone at TP 1 (seen on the CPU build), the full
    # parallel-rank suffix otherwise; the table is the trace's name without the timestamp.
    for rank in range(2):
        name = f"{PREFIX}_{rank_suffix.format(r=rank)}"
        write_trace(tmp_path / f"{name}.1796013877177788456.pt.trace.json.gz")
        (tmp_path / f"{name}.profiler_out.txt").write_text("Self CPU time total: 1.0ms\n")
    # Another campaign's files and the frontend's trace are not this campaign's.
    write_trace(tmp_path / "vllm-ops-20261129T000000Z_rank0.1796013800000000000.pt.trace.json.gz")
    (tmp_path / "vllm-ops-20261129T000000Z_rank0.profiler_out.txt").write_text("")
    write_trace(tmp_path / "host_123.async_llm.1796013877177788456.pt.trace.json.gz")

    traces, tables = find(tmp_path, 2)

    assert [t["rank"] for t in traces] == [0, 1]
    assert all(t["file"].startswith(PREFIX) for t in traces)
    assert [Path(t).name for t in tables] == [
        f"{PREFIX}_{rank_suffix.format(r=r)}.profiler_out.txt" for r in range(2)]


def test_a_missing_rank_is_named(tmp_path):
    write_trace(tmp_path / f"{PREFIX}_rank0.1.pt.trace.json.gz")
    with pytest.raises(trace_files.TraceError, match=r"no trace for rank\(s\) 1"):
        find(tmp_path, 2)


def test_a_truncated_trace_is_refused_with_its_rank(tmp_path):
    write_trace(tmp_path / f"{PREFIX}_rank0.1.pt.trace.json.gz", complete=False)
    with pytest.raises(trace_files.TraceError, match=r"rank 0: .* is damaged"):
        find(tmp_path, 1)
