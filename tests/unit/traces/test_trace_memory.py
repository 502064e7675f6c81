"""Memory does not grow with the number of GPU activities (issue 3: "Streaming").

Not a timed test: it reads two synthetic traces with the same steps, the same
all-reduce calls and the same kernel names, one with 10x the kernels of the other,
and compares what the reader retains (tracemalloc, and the sizes of its tables).
The activities go to a spill file on disk instead (28 bytes each), which is removed
afterwards, also when the file turns out to be bad.
"""

import gzip
import os
import tempfile
import tracemalloc

import pytest

from vllm_ops.traces import reader
from vllm_ops.traces.categories import Classifier
from vllm_ops.traces.errors import TraceInputError
from vllm_ops.traces.reader import read_trace
from vllm_ops.traces.summary import allreduce_calls, summarize

PATTERNS = {"decode": __import__("re").compile(r"^decode_step$")}
STEPS = 20
NAMES = ["nvjet_sm90_tst_64x8", "fused_moe_kernel", "rms_norm_kernel", "flash_fwd_kernel"]


def _events(ev, kernels_per_step):
    events = []
    for s in range(STEPS):
        t0 = s * 1000.0
        events.append(ev.kernel("cross_device_reduce_1stage", t0 + 1.0, 2.0, corr=s))
        for i in range(kernels_per_step):
            events.append(ev.kernel(NAMES[i % len(NAMES)], t0 + 5.0 + i * 0.001, 0.5, corr=100000 + i))
    events += [ev.span("decode_step", s * 1000.0, 900.0) for s in range(STEPS)]
    return events


def _sizes(data):
    """The length of every table the reader keeps."""
    out = {"names": len(data.names), "graph_launches": len(data.graph_launch_corr)}
    for kind, t in data.kinds.items():
        for attr in ("spans", "starts", "ends", "total_us", "calls", "kept"):
            out[f"{kind}.{attr}"] = len(getattr(t, attr))
    return out


def _measure(path, parser):
    keep = allreduce_calls(Classifier())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        data = read_trace(path, PATTERNS, parser=parser, keep_calls=keep)
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return data, retained - before, peak - before


@pytest.fixture
def spill_dirs(tmp_path, monkeypatch):
    """Temporary files go under a fresh folder; returns it and the spill sizes seen."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    sizes = []
    attribute = reader._Builder.attribute

    def spy(self, spill):
        sizes.append(os.fstat(spill.fileno()).st_size)
        return attribute(self, spill)

    monkeypatch.setattr(reader._Builder, "attribute", spy)
    return tmp, sizes


@pytest.mark.parametrize("parser,layout", [("fast", "torch"), ("fast", "pretty"), ("general", "torch")])
def test_retained_memory_does_not_grow_with_activity_count(write_trace, ev, monkeypatch, parser, layout, spill_dirs):
    # Small chunks, head and tail, spill buffer and read-back chunk, so that both files
    # span many chunks and buffers are the same size for both.
    monkeypatch.setattr(reader, "CHUNK", 64 << 10)
    monkeypatch.setattr(reader, "_HEAD_KEEP", 64 << 10)
    monkeypatch.setattr(reader, "_TAIL_KEEP", 64 << 10)
    monkeypatch.setattr(reader, "_SPILL_BUFFER", 16 << 10)
    monkeypatch.setattr(reader, "_SPILL_READ", reader._SPILL.size * 512)
    small_path = write_trace("small.json", _events(ev, 250), gz=False, layout=layout)
    big_path = write_trace("big.json", _events(ev, 2500), gz=False, layout=layout)
    small, small_kept, small_peak = _measure(small_path, parser)
    big, big_kept, big_peak = _measure(big_path, parser)
    assert small.parser == big.parser == parser
    assert (small.activities, big.activities) == (STEPS * 251, STEPS * 2501)
    # Every table has the same size: they are indexed by name, step or all-reduce call.
    assert _sizes(big) == _sizes(small)
    assert _sizes(big)["decode.kept"] == STEPS
    # 45,000 more activities: the reader that kept them (28 bytes each) retained 1.5 MB more
    # for the big file here; now both retain 7-16 KB (allocator noise, not a trend: 100x the
    # kernels retains 11 KB).
    assert abs(big_kept - small_kept) < 64 << 10, (small_kept, big_kept)
    assert abs(big_peak - small_peak) < 128 << 10, (small_peak, big_peak)
    # The activities went to disk instead, one fixed-size record each, and the spill is gone.
    tmp, sizes = spill_dirs
    assert sizes == [STEPS * 251 * reader._SPILL.size, STEPS * 2501 * reader._SPILL.size]
    assert os.listdir(tmp) == []


def test_the_spill_is_removed_on_bad_input_and_on_fallback(write_trace, ev, tmp_path, monkeypatch, spill_dirs):
    tmp, sizes = spill_dirs
    good = write_trace("good_rank0.json.gz", _events(ev, 40))
    raw = gzip.decompress(open(good, "rb").read())
    cut = tmp_path / "cut_rank0.json.gz"
    cut.write_bytes(gzip.compress(raw)[:-4000])
    for parser in ("fast", "general"):
        with pytest.raises(TraceInputError, match="cut_rank0.json.gz"):
            read_trace(str(cut), PATTERNS, parser=parser)
        assert os.listdir(tmp) == []
    # A kernel laid out differently half-way through: the fast path gives up mid-file and
    # the general parser reads it again with a fresh spill; neither is left behind.
    monkeypatch.setattr(reader, "CHUNK", 4 << 10)
    at = raw.index(b', "pid": ', raw.index(b'"cat": "kernel"', len(raw) // 2))
    odd = tmp_path / "odd_rank0.json"
    odd.write_bytes(raw[:at] + b',  "pid": ' + raw[at + len(b', "pid": '):])
    data = read_trace(str(odd), PATTERNS)
    assert data.parser == "general" and data.activities == STEPS * 41
    assert sizes == [STEPS * 41 * reader._SPILL.size]
    assert os.listdir(tmp) == []


def test_the_measured_traces_are_summarized_correctly(write_trace, ev):
    s = summarize([write_trace("t_rank0.json.gz", _events(ev, 40))], decode_pattern="^decode_step$")
    rank = s["ranks"][0]
    assert rank["decode_steps"] == STEPS
    assert rank["cuda_ms_per_step"] == pytest.approx((2.0 + 40 * 0.5) / 1000)
    assert rank["categories"]["allreduce"]["ms_per_step"] == pytest.approx(0.002)
    assert s["allreduce"]["calls_matched"] == STEPS
