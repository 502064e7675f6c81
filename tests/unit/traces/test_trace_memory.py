"""Memory does not grow with the size of the JSON beyond what the reader promises (issue 3: "Streaming").

Not a timed test. The reader's docstring: what a rank costs in memory is the numpy arrays of
GPU activities (28 bytes each) and host launch calls (16 bytes each), one decompressed chunk,
the head and tail, and small tables; every other event is dropped as it streams by. So two
synthetic traces with the same steps, the same all-reduce calls and the same kernel names, one
with 10x the kernels (and launch calls) of the other, must retain the same memory *apart from
those arrays*, and the arrays must be exactly 44 bytes per activity with its launch. The
activities and launches go through spill files on disk on the way (removed afterwards, also when
the file turns out to be bad).
"""

import gzip
import os
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from vllm_ops.traces import reader
from vllm_ops.traces.annotations import StepMatcher
from vllm_ops.traces.categories import Classifier
from vllm_ops.traces.errors import TraceInputError
from vllm_ops.traces.reader import read_trace
from vllm_ops.traces.summary import allreduce_calls, summarize

MATCHER = StepMatcher(decode_pattern=r"^decode_step$")
STEPS = 20
NAMES = ["nvjet_sm90_tst_64x8", "fused_moe_kernel", "rms_norm_kernel", "flash_fwd_kernel"]


def _events(ev, kernels_per_step, launches=True):
    """STEPS steps, each an all-reduce and ``kernels_per_step`` kernels, every one with its launch call."""
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
    events += [ev.span("decode_step", s * 1000.0, 900.0) for s in range(STEPS)]
    return events


def _sizes(data):
    """The length of every table the reader keeps besides the two arrays."""
    return {"names": len(data.names), "gpu_spans": len(data.gpu_spans), "cpu_spans": len(data.cpu_spans),
            "graph_launches": len(data.graph_launches), "collective_args": len(data.collective_args),
            "process_groups": len(data.process_groups), "gpu_annotation_names": len(data.gpu_annotation_names),
            "cpu_annotation_names": len(data.cpu_annotation_names), "activity_pids": len(data.activity_pids)}


def _arrays(data):
    return data.acts.nbytes + data.launches.nbytes


def _measure(path, parser):
    keep = allreduce_calls(Classifier())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        data = read_trace(path, MATCHER, parser=parser, keep_calls=keep)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return data, retained - before, peak - before


@pytest.fixture
def spill_dirs(tmp_path, monkeypatch):
    """Temporary files go under a fresh folder; returns it and the (name, size) of every spill
    file read back into an array."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    seen = []
    fromfile = np.fromfile

    def spy(file, *args, **kwargs):
        seen.append((os.path.basename(file), os.path.getsize(file)))
        return fromfile(file, *args, **kwargs)

    monkeypatch.setattr(reader.np, "fromfile", spy)
    return tmp, seen


@pytest.mark.parametrize("parser,layout", [("fast", "torch"), ("fast", "pretty"), ("general", "torch")])
def test_retained_memory_grows_only_by_the_arrays(write_trace, ev, monkeypatch, parser, layout, spill_dirs):
    # Small chunks, head, tail and spill buffer, so that both files span many chunks and the
    # buffers are the same size for both.
    monkeypatch.setattr(reader, "CHUNK", 64 << 10)
    monkeypatch.setattr(reader, "_HEAD_KEEP", 64 << 10)
    monkeypatch.setattr(reader, "_TAIL_KEEP", 64 << 10)
    monkeypatch.setattr(reader, "_SPILL_BUFFER", 16 << 10)
    small_path = write_trace("small.json", _events(ev, 250), gz=False, layout=layout)
    big_path = write_trace("big.json", _events(ev, 2500), gz=False, layout=layout)
    assert os.path.getsize(big_path) > 8 * os.path.getsize(small_path)
    small, small_kept, small_peak = _measure(small_path, parser)
    big, big_kept, big_peak = _measure(big_path, parser)
    assert small.parser == big.parser == parser
    n_small, n_big = STEPS * 251, STEPS * 2501
    assert (small.activities, big.activities) == (n_small, n_big)
    assert (len(small.launches), len(big.launches)) == (n_small, n_big)
    # 44 bytes per activity with its launch call: 28 for the activity, 16 for the launch
    assert _arrays(small) == 44 * n_small and _arrays(big) == 44 * n_big
    # Every other table has the same size: they are indexed by name, step or all-reduce call.
    assert _sizes(big) == _sizes(small)
    assert _sizes(big)["collective_args"] == STEPS and _sizes(big)["gpu_spans"] == STEPS
    # 45,000 more activities (and launches): apart from the arrays, both reads retain the same
    # (allocator noise, not a trend), and their peaks exceed the arrays by no more for the big file.
    assert abs((big_kept - _arrays(big)) - (small_kept - _arrays(small))) < 64 << 10, (small_kept, big_kept)
    assert big_peak - _arrays(big) < small_peak - _arrays(small) + (128 << 10), (small_peak, big_peak)
    # The activities and launches went through one spill file each, and the spills are gone.
    tmp, seen = spill_dirs
    assert seen == [("activities.bin", 28 * n_small), ("launches.bin", 16 * n_small),
                    ("activities.bin", 28 * n_big), ("launches.bin", 16 * n_big)]
    assert os.listdir(tmp) == []


def test_the_spill_is_removed_on_bad_input_and_on_fallback(write_trace, ev, tmp_path, monkeypatch, spill_dirs):
    tmp, seen = spill_dirs
    good = write_trace("good_rank0.json.gz", _events(ev, 40, launches=False))
    raw = gzip.decompress(Path(good).read_bytes())
    cut = tmp_path / "cut_rank0.json.gz"
    cut.write_bytes(gzip.compress(raw)[:-4000])
    for parser in ("fast", "general"):
        with pytest.raises(TraceInputError, match=r"cut_rank0\.json\.gz"):
            read_trace(str(cut), MATCHER, parser=parser)
        assert os.listdir(tmp) == []
    assert seen == []  # nothing was read back
    # A kernel laid out differently half-way through: the fast path gives up mid-file and
    # the general parser reads it again with fresh spills; neither is left behind.
    monkeypatch.setattr(reader, "CHUNK", 4 << 10)
    at = raw.index(b', "pid": ', raw.index(b'"cat": "kernel"', len(raw) // 2))
    odd = tmp_path / "odd_rank0.json"
    odd.write_bytes(raw[:at] + b',  "pid": ' + raw[at + len(b', "pid": '):])
    data = read_trace(str(odd), MATCHER)
    assert data.parser == "general" and data.activities == STEPS * 41
    assert seen == [("activities.bin", STEPS * 41 * 28), ("launches.bin", 0)]
    assert os.listdir(tmp) == []


def test_the_measured_traces_are_summarized_correctly(write_trace, ev):
    s = summarize([write_trace("t_rank0.json.gz", _events(ev, 40))], decode_pattern="^decode_step$")
    rank = s["ranks"][0]
    assert rank["decode_steps"] == STEPS
    assert rank["cuda_ms_per_step"] == pytest.approx((2.0 + 40 * 0.5) / 1000)
    assert rank["categories"]["allreduce"]["ms_per_step"] == pytest.approx(0.002)
    assert s["allreduce"]["calls_matched"] == STEPS
    # window: the all-reduce at 1 us to the last kernel's end at 5 + 39 * 0.001 + 0.5 us
    assert rank["steps"][0]["window_ms"] == pytest.approx((5.0 + 39 * 0.001 + 0.5 - 1.0) / 1000, abs=1e-4)
