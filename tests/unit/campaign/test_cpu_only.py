"""A campaign whose traces hold no GPU kernels (vLLM's CPU backend) succeeds and says so plainly:
headline, figures, history row, chart and the vllm-campaign-report command, from a real CPU trace."""

import csv
import json

import pytest

from vllm_ops.campaign import append_history, decode_figures, headline, history_row, write_chart
from vllm_ops.campaign.cli import main

from campaign_helpers import make_summary, rank_entry, write_json

NOT_MEASURED = "no GPU kernels in the traces: all-reduce share not measured"


def test_headline(cpu_summary):
    assert headline("vllm-cpu", cpu_summary, "artifacts/vllm-cpu/c1/report.md") == (
        "vllm-cpu: no GPU kernels in the traces: all-reduce share not measured (15 decode steps; 1 warning) "
        "-> artifacts/vllm-cpu/c1/report.md")


def test_headline_of_several_cpu_ranks_without_steps():
    s = make_summary([rank_entry(0, None, steps=0), rank_entry(1, None, steps=0)])
    assert headline("h", s) == f"h: {NOT_MEASURED} (no decode steps)"


def test_figures_are_none_not_zero(cpu_summary):
    fig = decode_figures(cpu_summary)
    assert fig == {
        "allreduce_ms_per_step": None, "cuda_ms_per_step": None, "allreduce_share": None,
        "skew_corrected_ms": None, "decode_steps": 15, "ranks_used": 0, "ranks_total": 1,
        "gpu_time_measured": False, "ranks_not_measured": [0], "reason": NOT_MEASURED,
    }


def test_a_summary_from_before_the_markers_reads_the_same(cpu_summary):
    old = json.loads(json.dumps(cpu_summary))
    for key in ("gpu_time_measured", "ranks_without_gpu_kernels"):
        del old[key]
    for r in old["ranks"]:
        for key in ("gpu_kernels", "gpu_time_measured", "steps_from"):
            del r[key]
    assert headline("h", old) == headline("h", cpu_summary)


def test_history_row_leaves_the_gpu_columns_empty(tmp_path, cpu_summary):
    row = history_row({"id": "c1", "host": "vllm-cpu", "tensor_parallel_size": 1}, cpu_summary)
    for key in ("cuda_ms_per_step", "allreduce_ms_per_step", "allreduce_share", "allreduce_skew_corrected_ms"):
        assert row[key] is None, key
    assert row["decode_steps"] == 15 and row["warnings"] == 1
    path = tmp_path / "history.csv"
    append_history(path, row)
    (line,) = list(csv.DictReader(path.read_text().splitlines()))
    assert line["cuda_ms_per_step"] == line["allreduce_share"] == line["allreduce_ms_per_step"] == ""
    assert line["decode_steps"] == "15"


def test_chart_states_it_and_has_no_bars(tmp_path, cpu_summary):
    drawn = write_chart(cpu_summary, tmp_path / "decode.png", host="vllm-cpu", campaign_id="c1")
    assert drawn["bars"] == 0 and drawn["categories"] == [] and drawn["note"] == NOT_MEASURED
    assert (tmp_path / "decode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def chart_texts(monkeypatch):
    """The texts the chart writes into the PNG, caught on their way to matplotlib."""
    from matplotlib.axes import Axes

    said = []
    original = Axes.text

    def text(self, x, y, s, *args, **kwargs):
        said.append(s)
        return original(self, x, y, s, *args, **kwargs)

    monkeypatch.setattr(Axes, "text", text)
    return said


def test_chart_text(tmp_path, cpu_summary, chart_texts):
    write_chart(cpu_summary, tmp_path / "decode.png")
    assert chart_texts == ["No GPU kernel events in the traces (CPU-only run?):\n"
                    "GPU time and all-reduce share not measured.\n\n15 decode steps were found in the annotations."]


def test_mixed_chart_labels_the_unmeasured_rank(tmp_path, two_ranks, chart_texts):
    s = make_summary([*two_ranks["ranks"], rank_entry(2, None)])
    drawn = write_chart(s, tmp_path / "mixed.png")
    assert drawn["bars"] == 2 * 4 and drawn["note"] is None
    assert chart_texts == ["12.00 ms", "30.00 ms", "no GPU kernels:\nnot measured"]


def test_command_line(tmp_path, cpu_summary, capsys):
    summary = write_json(tmp_path / "summary.json", cpu_summary)
    out = tmp_path / "decode.png"
    assert main(["chart", summary, str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out} (0 bars, 1 ranks; {NOT_MEASURED})\n"
    assert main(["headline", summary, "--host", "vllm-cpu"]) == 0
    assert capsys.readouterr().out == f"vllm-cpu: {NOT_MEASURED} (15 decode steps; 1 warning)\n"
    meta = write_json(tmp_path / "meta.json", {"id": "c1", "host": "vllm-cpu"})
    assert main(["history", summary, meta, str(tmp_path / "history.csv")]) == 0


@pytest.mark.parametrize("unmeasured", [[1], [1, 2]])
def test_mixed_headline_never_averages_zeros_in(unmeasured):
    ranks = [rank_entry(0, {"allreduce": 2.0, "gemm": 8.0})] + [rank_entry(r, None) for r in unmeasured]
    line = headline("h", make_summary(ranks))
    named = "rank 1" if unmeasured == [1] else "ranks 1, 2"
    assert line == (f"h: all-reduce 20.0% of decode CUDA time (2.00 of 10.00 ms/step; no skew correction; "
                    f"1 of {1 + len(unmeasured)} ranks; {named} not measured: no GPU kernels)")
