"""The headline: mean over ranks, share = ratio of the means, plain sentences without data."""

import bisect
import gzip
import json
import re

import pytest

from vllm_ops.campaign import CampaignInputError, decode_figures, headline
from vllm_ops.records import RecordError

from campaign_helpers import H200, make_summary, rank_entry

NUMBERS = re.compile(r"all-reduce ([\d.]+)% of decode CUDA time \(([\d.]+) of ([\d.]+) ms/step; "
                     r"skew-corrected ([\d.]+) ms\)")


def test_hand_made_summary(two_ranks):
    # all-reduce (4 + 20) / 2 = 12 ms; CUDA (12 + 30) / 2 = 21 ms; 12 / 21 = 57.14 %
    line = headline("vllm-sandbox", two_ranks, "artifacts/vllm-sandbox/c1/report.md")
    assert line == ("vllm-sandbox: all-reduce 57.1% of decode CUDA time (12.00 of 21.00 ms/step; "
                    "skew-corrected 3.50 ms) -> artifacts/vllm-sandbox/c1/report.md")
    fig = decode_figures(two_ranks)
    assert fig["allreduce_share"] == round(12 / 21, 4) and fig["reason"] is None
    # not the summarizer's share_mean, the mean of 4/12 and 20/30
    assert two_ranks["allreduce"]["share_mean"] == pytest.approx(0.5)


def test_the_three_numbers_agree(two_ranks):
    share, ar, cuda, _ = map(float, NUMBERS.search(headline("h", two_ranks)).groups())
    assert share == pytest.approx(100 * ar / cuda, abs=0.05)


def test_report_path_is_optional(two_ranks):
    assert "->" not in headline("h", two_ranks)
    assert "->" not in headline("h", two_ranks, "")


def test_small_figures_keep_three_significant_digits():
    s = make_summary([rank_entry(0, {"allreduce": 0.006, "gemm": 0.004})], skew=0.006)
    assert headline("h", s) == ("h: all-reduce 60.0% of decode CUDA time (0.006 of 0.01 ms/step; "
                                "skew-corrected 0.006 ms)")


def test_missing_skew_partial_ranks_and_warnings():
    s = make_summary([rank_entry(0, {"allreduce": 2.0, "gemm": 8.0}), rank_entry(1, None)],
                     warnings=["rank 1: no GPU kernels", "another"])
    assert headline("h", s) == ("h: all-reduce 20.0% of decode CUDA time (2.00 of 10.00 ms/step; "
                                "no skew correction; 1 of 2 ranks; rank 1 not measured: no GPU kernels; 2 warnings)")


def test_a_gpu_rank_without_steps_is_not_called_unmeasured():
    s = make_summary([rank_entry(0, {"allreduce": 2.0, "gemm": 8.0}), rank_entry(1, None, steps=0, gpu_kernels=9)])
    assert headline("h", s) == ("h: all-reduce 20.0% of decode CUDA time (2.00 of 10.00 ms/step; "
                                "no skew correction; 1 of 2 ranks)")


@pytest.mark.parametrize(("ranks", "reason"), [
    ([rank_entry(0, None, steps=0, gpu_kernels=9), rank_entry(1, None, steps=0, gpu_kernels=9)],
     "no decode steps in the traces (no GPU annotation matches '^decode_step$')"),
    ([rank_entry(0, None, steps=0, gpu_kernels=9), rank_entry(1, None)],
     "no decode steps in the traces (no GPU annotation matches '^decode_step$'); rank 1 not measured: "
     "no GPU kernels"),
    ([rank_entry(0, {"gemm": 0.0})], "no GPU activity starts inside the decode steps, so there is no decode CUDA time"),
    ([], "the summary has no ranks (no trace was read)"),
])
def test_nothing_to_measure_is_a_sentence(ranks, reason):
    line = headline("vllm-sandbox", make_summary(ranks), "r.md")
    assert line == f"vllm-sandbox: {reason}; no all-reduce figures -> r.md"
    assert "%" not in line


@pytest.mark.parametrize(("args", "error", "message"), [
    # what is no summary: the summary record's one check says so
    (("h", "text"), RecordError, "the summary: a trace summary must be a JSON object, not str"),
    (("h", {"ranks": ["x"]}), RecordError, "the summary: 'ranks' entry 0 must be an object, not str"),
    (("h", {"ranks": [{"cuda_ms_per_step": "lots", "decode_steps": 1}]}), CampaignInputError,
     "malformed trace summary"),
    (("", {"ranks": []}), CampaignInputError, "host must be a non-empty string"),
    (("h", {"ranks": []}, 5), CampaignInputError, "report_path must be a string"),
])
def test_bad_input(args, error, message):
    with pytest.raises(error, match=message):
        headline(*args)


def _independent_rank(path):
    """CUDA and all-reduce us per rank, straight from the trace JSON, without the summarizer."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "gpu_user_annotation" and e.get("name") == "decode_step")
    starts = [s for s, _ in spans]
    cuda, allreduce = 0.0, []
    for e in events:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i >= 0 and e["ts"] < spans[i][1]:
            cuda += e["dur"]
            if "AllReduce" in e["name"]:
                allreduce.append((e["ts"], e["dur"]))
    return len(spans), cuda, [d for _, d in sorted(allreduce)]


def test_real_h200_traces(h200_summary):
    ranks = [_independent_rank(H200 / f"tp2_rank{i}.pt.trace.json.gz") for i in (0, 1)]
    ar_ms = sum(sum(a) / n for n, _, a in ranks) / 2 / 1000
    cuda_ms = sum(c / n for n, c, _ in ranks) / 2 / 1000
    matched = min(len(a) for _, _, a in ranks)
    per_call_min = sum(min(pair) for pair in zip(*(a[:matched] for _, _, a in ranks), strict=True)) / matched
    skew_ms = per_call_min * sum(len(a) / n for n, _, a in ranks) / 2 / 1000

    # The kernel-time figures (which include waiting) stay what they were, for the report and history.
    fig = decode_figures(h200_summary)
    assert fig["allreduce_ms_per_step"] == pytest.approx(ar_ms, abs=0.0006)
    assert fig["cuda_ms_per_step"] == pytest.approx(cuda_ms, abs=0.0006)
    assert fig["allreduce_share"] == pytest.approx(ar_ms / cuda_ms, abs=0.0006)
    assert fig["skew_corrected_ms"] == pytest.approx(skew_ms, abs=0.0006)
    assert fig["decode_steps"] == ranks[0][0] == 12
    # The headline leads with the verdict instead (its figures are checked in tests/unit/traces).
    line = headline("vllm-sandbox", h200_summary, "artifacts/vllm-sandbox/c1/report.md")
    # issue 20 corrected the answer: rank 1's host limits the run, and the capture is not steady
    assert line.startswith("vllm-sandbox: host-bound on rank 1, not steady: decode step ")
    assert "all-reduce transfer" in line and " drifting to " in line and "(rank 1's host; rank 0's " in line
    assert not NUMBERS.search(line) and line.endswith(" -> artifacts/vllm-sandbox/c1/report.md")


@pytest.mark.parametrize(("downtime", "said"), [
    ({"seconds_not_ready": 0.0, "gaps": 0, "longest_gap_s": 0.0}, "; downtime 0 s -> r.md"),
    ({"seconds_not_ready": 8.26, "gaps": 1, "longest_gap_s": 8.26}, "; downtime 8.3 s in 1 gap -> r.md"),
    ({"seconds_not_ready": 17.25, "gaps": 2, "longest_gap_s": 9.14},
     "; downtime 17.2 s in 2 gaps (longest 9.1 s) -> r.md"),
])
def test_the_headline_says_what_the_campaign_cost_in_downtime(two_ranks, downtime, said):
    plain = headline("h", two_ranks)
    assert headline("h", two_ranks, "r.md", downtime) == plain + said
    assert headline("h", two_ranks, "r.md", None) == plain + " -> r.md"


def test_a_broken_downtime_record_is_refused(two_ranks):
    with pytest.raises(CampaignInputError, match="a downtime record needs seconds_not_ready and gaps"):
        headline("h", two_ranks, None, {"gaps": "x"})
