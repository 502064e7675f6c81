"""Memory does not grow with the number of GPU activities (issue 3: "Streaming").

Not a timed test. The reader's docstring: a rank's GPU activities (28 bytes each) and host
launch calls (16 bytes each) are spilled to tables on disk (unlinked temporary files) and stay
there; the per-step analysis reads them back a bounded chunk at a time (``spill.CHUNK_ROWS``
records, a batch of whole steps of at most ``timeline._BATCH_ROWS``), and everything else the
reader keeps is sized by steps, names and all-reduce calls. So two synthetic traces with the same
steps, the same all-reduce calls and the same kernel names, one with 10x the kernels (and launch
calls) of the other, must retain the same memory after the read, and reach the same peak while
read and summarized, within allocator noise far below the 2 MB that holding the big trace's
activities and launches in memory would cost. The spill tables are closed afterwards, also when
the file turns out to be bad.
"""

import gzip
import os
import tempfile
import tracemalloc
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, reader, spill, summarize, timeline
from vllm_ops.traces.annotations import StepMatcher
from vllm_ops.traces.categories import Classifier
from vllm_ops.traces.errors import TraceInputError
from vllm_ops.traces.ranks import allreduce_calls, summarize_rank
from vllm_ops.traces.reader import read_trace

MATCHER = StepMatcher(decode_pattern=r"^decode_step$")
STEPS = 20
NAMES = ["nvjet_sm90_tst_64x8", "fused_moe_kernel", "rms_norm_kernel", "flash_fwd_kernel"]


def _events(ev, kernels_per_step, launches=True, spans="gpu_user_annotation"):
    """STEPS steps, each an all-reduce and ``kernels_per_step`` kernels, every one with its launch call;
    ``spans``: the category of the step annotations (``user_annotation``: steps found from the launches)."""
    events = []
    for s in range(STEPS):
        t0 = s * 1000.0
        if launches:
            events.append(ev.runtime("cudaLaunchKernel", t0 + 0.5, 0.1, corr=s))
        events.append(ev.kernel("cross_device_reduce_1stage", t0 + 1.0, 2.0, corr=s))
        for i in range(kernels_per_step):
            corr = 100000 + s * 10000 + i
            if launches:
                events.append(ev.runtime("cudaLaunchKernel", t0 + 4.0 + i * 0.001, 0.0005, corr=corr))
            events.append(ev.kernel(NAMES[i % len(NAMES)], t0 + 5.0 + i * 0.001, 0.5, corr=corr))
        events.append(ev.cpu_op("aten::mm", t0 + 3.0, 1.0))
    events += [ev.span("decode_step", s * 1000.0, 900.0, cat=spans) for s in range(STEPS)]
    return events


def _sizes(data):
    """The length of every table the reader keeps besides the two arrays."""
    return {"names": len(data.names), "gpu_spans": len(data.gpu_spans), "cpu_spans": len(data.cpu_spans),
            "graph_launches": len(data.graph_launches), "collective_args": len(data.collective_args),
            "process_groups": len(data.process_groups), "gpu_annotation_names": len(data.gpu_annotation_names),
            "cpu_annotation_names": len(data.cpu_annotation_names), "activity_pids": len(data.activity_pids)}


def _measure(path, parser):
    """Memory retained by the read (the TraceData, open) and the peak of reading and summarizing
    the rank, both above what was allocated before."""
    classifier = Classifier()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with read_trace(path, MATCHER, parser=parser, keep_calls=allreduce_calls(classifier)) as data:
            retained = tracemalloc.get_traced_memory()[0]
            rank = summarize_rank(data, classifier)
            peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return data, rank, retained - before, peak - before


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """Temporary files go under a fresh folder; returns it and every spill table made, with its
    size in bytes when it was closed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    made = []
    init, close = spill.Table.__init__, spill.Table.close

    def spy_init(self, dtype):
        init(self, dtype)
        made.append(self)

    def spy_close(self):
        if not self.closed:
            self.size = os.fstat(self.fd).st_size
        close(self)

    monkeypatch.setattr(spill.Table, "__init__", spy_init)
    monkeypatch.setattr(spill.Table, "close", spy_close)
    return tmp, made


@pytest.mark.parametrize("parser,layout,spans", [
    ("fast", "torch", "gpu_user_annotation"), ("fast", "pretty", "gpu_user_annotation"),
    ("general", "torch", "gpu_user_annotation"), ("fast", "torch", "user_annotation"),
])
def test_memory_does_not_grow_with_the_activities(write_trace, ev, monkeypatch, parser, layout, spans, tables):
    # Small chunks, head, tail, spill buffer, spill chunks and step batches, so that both files span
    # many of each, and the buffers are the same size for both.
    monkeypatch.setattr(reader, "CHUNK", 64 << 10)
    monkeypatch.setattr(reader, "_HEAD_KEEP", 64 << 10)
    monkeypatch.setattr(reader, "_TAIL_KEEP", 64 << 10)
    monkeypatch.setattr(reader, "_SPILL_BUFFER", 16 << 10)
    monkeypatch.setattr(spill, "CHUNK_ROWS", 4096)
    monkeypatch.setattr(timeline, "_BATCH_ROWS", 4096)
    small_path = write_trace("small.json", _events(ev, 250, spans=spans), gz=False, layout=layout)
    big_path = write_trace("big.json", _events(ev, 2500, spans=spans), gz=False, layout=layout)
    assert os.path.getsize(big_path) > 8 * os.path.getsize(small_path)
    _measure(small_path, parser)  # once unmeasured: the first read fills caches (regexes, imports)
    small, small_rank, small_kept, small_peak = _measure(small_path, parser)
    big, big_rank, big_kept, big_peak = _measure(big_path, parser)
    assert small.parser == big.parser == parser
    n_small, n_big = STEPS * 251, STEPS * 2501
    assert (small.activities, big.activities) == (n_small, n_big)
    # Both were summarized in full: every step, with all its activities and their launches.
    for rank, n in ((small_rank, n_small), (big_rank, n_big)):
        steps = rank["sets"]["primary"]["steps"]
        assert len(steps) == STEPS and sum(s["activities"] for s in steps) == n
        assert rank["sets"]["primary"]["steps_from"] == spans and rank["activities_without_launch"] == 0
        assert len(rank["sets"]["primary"]["calls"]["ts"]) == STEPS
    # Every table the reader keeps has the same size: they are indexed by name, step or all-reduce call.
    assert _sizes(big) == _sizes(small)
    assert _sizes(big)["collective_args"] == STEPS and _sizes(big)[
        "gpu_spans" if spans == "gpu_user_annotation" else "cpu_spans"] == STEPS
    # 45,000 more activities and launches (1.98 MB as arrays in memory): both reads retain the same,
    # and both peaks are the same, within allocator noise.
    assert abs(big_kept - small_kept) < 64 << 10, (small_kept, big_kept)
    assert abs(big_peak - small_peak) < 256 << 10, (small_peak, big_peak)
    # The activities and launches went to one spill table each, 28 and 16 bytes a record, and
    # every table (those of the per-step analysis too) is closed and left nothing in the folder.
    tmp, made = tables
    assert all(t.closed for t in made)
    assert [(d.act_table.size, d.launch_table.size) for d in (small, big)] == [
        (28 * n_small, 16 * n_small), (28 * n_big, 16 * n_big)]
    assert os.listdir(tmp) == []


def test_the_spill_is_removed_on_bad_input_and_on_fallback(write_trace, ev, tmp_path, monkeypatch, tables):
    tmp, made = tables
    good = write_trace("good_rank0.json.gz", _events(ev, 40, launches=False))
    raw = gzip.decompress(Path(good).read_bytes())
    cut = tmp_path / "cut_rank0.json.gz"
    cut.write_bytes(gzip.compress(raw)[:-4000])
    for parser in ("fast", "general"):
        with pytest.raises(TraceInputError, match=r"cut_rank0\.json\.gz"):
            read_trace(str(cut), MATCHER, parser=parser)
        assert os.listdir(tmp) == []
    assert len(made) == 4 and all(t.closed for t in made)
    # A kernel laid out differently half-way through: the fast path gives up mid-file and
    # the general parser reads it again with fresh spills; neither is left behind.
    monkeypatch.setattr(reader, "CHUNK", 4 << 10)
    at = raw.index(b', "pid": ', raw.index(b'"cat": "kernel"', len(raw) // 2))
    odd = tmp_path / "odd_rank0.json"
    odd.write_bytes(raw[:at] + b',  "pid": ' + raw[at + len(b', "pid": '):])
    made.clear()
    with read_trace(str(odd), MATCHER) as data:
        assert data.parser == "general" and data.activities == STEPS * 41
        assert [t.closed for t in made] == [True, True, False, False]  # the fast path's, the general's
        assert (data.act_table.rows, data.launch_table.rows) == (STEPS * 41, 0)
    assert all(t.closed for t in made) and [t.size for t in made[2:]] == [STEPS * 41 * 28, 0]
    assert os.listdir(tmp) == []


def test_the_measured_traces_are_summarized_correctly(write_trace, ev):
    s = summarize([write_trace("t_rank0.json.gz", _events(ev, 40))], SummaryOptions(decode_pattern="^decode_step$"))
    rank = s["ranks"][0]
    assert rank["decode_steps"] == STEPS
    assert rank["cuda_ms_per_step"] == pytest.approx((2.0 + 40 * 0.5) / 1000)
    assert rank["categories"]["allreduce"]["ms_per_step"] == pytest.approx(0.002)
    assert s["allreduce"]["calls_matched"] == STEPS
    # window: the all-reduce at 1 us to the last kernel's end at 5 + 39 * 0.001 + 0.5 us
    assert rank["steps"][0]["window_ms"] == pytest.approx((5.0 + 39 * 0.001 + 0.5 - 1.0) / 1000, abs=1e-4)
