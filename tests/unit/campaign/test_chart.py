"""The PNG chart: valid PNG, one bar segment per rank and category, a text chart without GPU data."""

import pytest

from vllm_ops.campaign import write_chart
from vllm_ops.campaign.chart import chart_title
from vllm_ops.records import RecordError

from campaign_helpers import make_summary, rank_entry

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_two_ranks(tmp_path, two_ranks):
    out = tmp_path / "charts" / "decode.png"
    drawn = write_chart(two_ranks, out, host="vllm-sandbox", campaign_id="c1")
    width, height = _png_size(out)
    assert width > 400 and height > 300
    # categories with time on some rank, in the summarizer's order; one segment per rank each
    assert drawn["categories"] == ["allreduce", "gemm", "norm", "memset"]
    assert drawn["bars"] == 2 * 4 and drawn["ranks"] == [0, 1] and drawn["path"] == str(out)
    assert not [p for p in out.parent.iterdir() if p.name != "decode.png"]  # no temporary file left


def test_real_h200(tmp_path, h200_summary):
    drawn = write_chart(h200_summary, tmp_path / "h200.png", title="H200 TP2")
    expected = [c for c in h200_summary["ranks"][0]["categories"]
                if any(r["categories"][c]["ms_per_step"] for r in h200_summary["ranks"])]
    assert drawn["categories"] == expected and drawn["categories"][0] == "allreduce"
    assert drawn["bars"] == len(h200_summary["ranks"]) * len(expected)
    _png_size(tmp_path / "h200.png")


def test_a_rank_without_data_gets_no_bar(tmp_path):
    s = make_summary([rank_entry(0, {"allreduce": 1.0, "gemm": 3.0}), rank_entry(1, None)])
    drawn = write_chart(s, tmp_path / "c.png")
    assert drawn["bars"] == 1 * 2 and drawn["ranks"] == [0, 1]


@pytest.mark.parametrize("ranks", [
    [rank_entry(0, None), rank_entry(1, None)],
    [rank_entry(0, None, steps=0, gpu_kernels=9)],
    [],
])
def test_no_gpu_data_draws_text_not_bars(tmp_path, ranks):
    drawn = write_chart(make_summary(ranks), tmp_path / "none.png", host="h", campaign_id="c")
    assert drawn["bars"] == 0 and drawn["categories"] == []
    _png_size(tmp_path / "none.png")


def test_title():
    title = "Decode kernel time per step by category (all-reduce includes waiting)"
    assert chart_title("h", "c1") == f"{title}\nh, campaign c1"
    assert chart_title() == "Decode kernel time per step by category (all-reduce includes waiting)"


def test_not_a_summary(tmp_path):
    with pytest.raises(RecordError, match="the summary: 'ranks' must be a list, not str"):
        write_chart({"ranks": "no"}, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_steps_chart_of_the_real_h200_pair(tmp_path, h200_summary):
    from vllm_ops.campaign.chart import step_parts, write_steps_chart

    out = tmp_path / "steps.png"
    drawn = write_steps_chart(h200_summary, out, host="vllm-sandbox", campaign_id="c1")
    width, height = _png_size(out)
    assert width > 800 and height > 400
    # 12 decode steps a rank, step 0 left out on both (the first profiled step)
    assert drawn == {"path": str(out), "ranks": [0, 1], "steps": 24, "left_out": 2, "note": None}
    for r in h200_summary["ranks"]:
        for s in r["steps"]:
            parts = step_parts(s)
            assert all(p >= 0 for p in parts)
            # a bar is the step's period (or, for the last step, its window): the parts add up
            assert sum(parts) == pytest.approx(s["period_ms"] if s["period_ms"] is not None else s["window_ms"],
                                               abs=1e-3)


def test_steps_chart_without_per_step_figures_says_so(tmp_path, cpu_summary, two_ranks):
    from vllm_ops.campaign.chart import write_steps_chart

    for summary in (cpu_summary, two_ranks):
        drawn = write_steps_chart(summary, tmp_path / "s.png")
        assert drawn["steps"] == 0 and drawn["ranks"] == [] and "no per-step GPU figures" in drawn["note"]
        _png_size(tmp_path / "s.png")
