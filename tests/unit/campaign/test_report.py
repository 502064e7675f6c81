"""The campaign's report.md, rendered with plain Jinja2 from Python (vllm_ops.campaign.report), and
the functions behind the campaign filters that the report no longer needs (headline, latency
statistics, duration, downtime), with the assertions their filter tests made."""

import re

import jinja2
import pytest

from vllm_ops.campaign import CampaignInputError, headline, latency_stats
from vllm_ops.campaign.report import TEMPLATE, render_report, report_figures
from vllm_ops.job import JobInputError, downtime_text, duration
from vllm_ops.records import RecordError
from vllm_ops.render import template_path

from campaign_helpers import make_summary, rank_entry


def test_the_former_filters_functions(two_ranks):
    assert headline("h", two_ranks, "r.md").endswith("skew-corrected 3.50 ms) -> r.md")
    assert latency_stats([1, 2, 3])["p50"] == 2.0
    assert duration("2025-01-31T12:00:00Z", "2025-01-31T12:01:01Z") == "1 min 1 s"
    assert downtime_text({"seconds_not_ready": 0, "gaps": 0}) == "downtime 0 s"
    # what the playbook test of the filters checked
    assert headline("localhost", two_ranks, "artifacts/x/report.md") == (
        "localhost: all-reduce 57.1% of decode CUDA time (12.00 of 21.00 ms/step; skew-corrected 3.50 ms) "
        "-> artifacts/x/report.md")
    ttft = latency_stats([40.0, 38.0, 45.0, 41.0])
    assert ttft["count"] == 4 and ttft["p50"] == 40.5 and ttft["max"] == 45.0
    assert duration("2025-01-31T12:00:00Z", "2025-01-31T12:14:07Z") == "14 min 7 s"


@pytest.mark.parametrize(("func", "args", "error", "message"), [
    (headline, ("h", "text"), RecordError, "a trace summary must be a JSON object, not str"),
    (headline, ({"ranks": []},), TypeError, "missing 1 required positional argument"),
    (latency_stats, ([1, "x"],), CampaignInputError, "latency #1 is 'x'"),
    (latency_stats, ([1.0, "slow"],), CampaignInputError, "latency #1 is"),
    (duration, ("2025-01-31T12:00:00", "2025-01-31T12:00:01Z"), JobInputError, "has no time zone"),
])
def test_errors(func, args, error, message):
    with pytest.raises(error, match=message):
        func(*args)


def test_the_template_ships_in_the_package_and_needs_no_ansible_filter(campaign):
    path = template_path(TEMPLATE)
    assert path.is_file() and path.parent.name == "templates"
    # a plain Jinja2 environment with no filter of the project's (only the templates beside it, for the
    # shared macros): the figures come computed
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True,
                             loader=jinja2.FileSystemLoader(str(path.parent)))
    text = env.from_string(path.read_text()).render(campaign=campaign, figures=report_figures(campaign))
    assert text == render_report(campaign)
    assert not re.search(r"\|\s*vllm_", path.read_text())  # and names none of the project's filters


def test_the_headline_is_passed_in_not_recomputed(campaign):
    figures = report_figures(campaign, "h: a headline computed elsewhere")
    assert "> h: a headline computed elsewhere\n" in render_report(campaign, figures)


def test_a_template_given_overrides_the_shipped_one(tmp_path, campaign):
    own = tmp_path / "mine.md.j2"
    own.write_text("{{ campaign.id }}: {{ figures.duration }}\n")
    assert render_report(campaign, template=own) == "c20250131T120000: 14 min 7 s\n"
    with pytest.raises(CampaignInputError, match=r"template .*nope.j2: No such file"):
        render_report(campaign, template=tmp_path / "nope.j2")
    own.write_text("{{ campaign.nothing_here }}")
    with pytest.raises(CampaignInputError, match=r"template .*mine.md.j2: .*nothing_here"):
        render_report(campaign, template=own)


def test_report_template(campaign):
    campaign["summary"]["allreduce"].update({"wait_ms_per_step_by_rank": {"0": 0.5, "1": 16.5}, "calls_matched": 610})
    campaign["summary"]["warnings"] = ["rank 1 (rank1.json.gz): 3 cudaGraphLaunch calls have | no activity"]
    text = render_report(campaign)
    assert text.startswith("# vLLM profiling campaign `c20250131T120000` on vllm-sandbox\n")
    assert ("> vllm-sandbox: all-reduce 57.1% of decode CUDA time (12.00 of 21.00 ms/step; skew-corrected "
            "3.50 ms; 1 warning)") in text
    for row in ("| duration | 14 min 7 s |", "| model | Qwen/Qwen3-8B |", "| vLLM version | 0.11.0 |",
                "| tensor parallel size | 2 |", "| max_model_len | 4096 |", "| `NCCL_ALGO` | Ring |",
                "| `NCCL_MAX_NCHANNELS` | 8 |", "| `HF_TOKEN` | (hidden) |", "| requests | 8 |",
                "| batch size | 1 |", "| prompt tokens | 512 |", "| output tokens | 128 |",
                "| warmup requests | 2 |", '"torch_profiler_dir": "/var/tmp/vllm-traces"',
                "| TTFT (time to first token) | 8 | 41.25 | 40.50 | 45.00 | 47.90 | 38.00 | 48.00 |",
                "| TPOT (time per output token) | 8 | 16.50 | 16.40 | 17.00 | 17.30 | 16.10 | 17.40 |",
                "Skew-corrected all-reduce over every decode step: **3.500 ms per decode step**", "over 610 calls",
                "rank 0 0.500 ms, rank 1 16.500 ms.",
                "| allreduce | 4.000 (33.3%) | 20.000 (66.7%) |",  # vllm_trace_markdown's category table
                "### Top kernels, decode, rank 1",
                "- rank 1 (rank1.json.gz): 3 cudaGraphLaunch calls have | no activity",
                "| 0 | `c1_rank0.pt.trace.json.gz` | 768367 | `" + "cd" * 32 + "` |",
                "![Kernel time per decode step by kernel category and rank (includes waiting inside all-reduce)]"
                "(decode.png)",
                "- JSON summary: [summary.json](summary.json)"):
        assert row in text, row
    assert "s3cr3t" not in text
    assert text.count("cudaGraphLaunch") == 1  # the warnings are listed once, in their own section
    assert text.index("| 0 | `c1_rank0") < text.index("| 1 | `c1_rank1")


def test_report_template_without_gpu_data():
    campaign = {"id": "c2", "host": "h", "started_at": "2025-01-31T12:00:00Z",
                "finished_at": "2025-01-31T12:00:42Z",
                "summary": make_summary([rank_entry(0, None)], warnings=["rank 0: no GPU kernels"]),
                "summary_json": "summary.json", "chart_png": "decode.png"}
    text = render_report(campaign)
    assert ("> h: no GPU kernels in the traces: all-reduce share not measured (10 decode steps; 1 warning)\n"
            in text)
    assert "| duration | 42 s |" in text and "| model | - |" in text
    assert "None recorded: the service ran without NCCL settings" in text
    assert "Profiler configuration: not recorded." in text
    assert "| TTFT (time to first token) | 0 | - | - |" in text
    assert "Skew-corrected all-reduce: not measured (no GPU kernels in the traces)." in text
    assert "| - | none recorded | - | - |" in text and "- rank 0: no GPU kernels" in text


def _words(text):
    return " ".join(text.split())


def test_report_of_a_real_cpu_campaign(cpu_summary):
    campaign = {"id": "c3", "host": "vllm-cpu", "started_at": "2025-01-31T12:00:00Z",
                "finished_at": "2025-01-31T12:01:00Z", "tensor_parallel_size": 1, "summary": cpu_summary,
                "summary_json": "summary.json", "chart_png": "decode.png"}
    text = render_report(campaign)
    assert ("> vllm-cpu: no GPU kernels in the traces: all-reduce share not measured (15 decode steps; "
            "1 warning)\n") in text
    words = _words(text)
    assert ("**No GPU kernels in the traces: GPU time and all-reduce share not measured.** The traces hold CPU "
            "operators and annotations only") in words
    assert "null in the JSON summary: not measured, not zero." in words
    assert "The headline's figures are means over ranks" not in words
    for line in ("| GPUs (from the traces) | none: no GPU kernel events in the traces |",
                 "Skew-corrected all-reduce: not measured (no GPU kernels in the traces).",
                 "Rank 0: no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not "
                 "measured.",
                 "| 0 | 15 | 2.679 | CPU annotations |",
                 "GPU time not measured on rank 0 (no GPU kernel events)."):
        assert line in text, line
    # Nothing unmeasured is shown as a number: no GPU table, no shares, no zero milliseconds.
    decode = text[text.index("## Where decode time goes"):text.index("## Warnings")]
    assert "CUDA ms/step" not in decode and "%" not in decode and "0.000" not in decode
    assert "Top kernels" not in decode and "All-reduce across ranks" not in decode


def test_report_names_the_unmeasured_rank_of_a_mixed_campaign(two_ranks):
    summary = make_summary([*two_ranks["ranks"], rank_entry(2, None)], skew=3.5)
    campaign = {"id": "c4", "host": "h", "started_at": "2025-01-31T12:00:00Z",
                "finished_at": "2025-01-31T12:01:00Z", "summary": summary,
                "summary_json": "summary.json", "chart_png": "decode.png"}
    words = _words(render_report(campaign))
    assert ("> h: all-reduce 57.1% of decode CUDA time (12.00 of 21.00 ms/step; skew-corrected 3.50 ms; "
            "2 of 3 ranks; rank 2 not measured: no GPU kernels)") in words
    assert ("Rank 2 has no GPU kernel events in its trace: GPU time and all-reduce share not measured there, so "
            "it is left out of the headline, the means and the skew correction rather than counted as zeros."
            ) in words
    assert "Rank 2: no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not " \
           "measured; left out of the figures above." in words
    assert "| allreduce | 4.000 (33.3%) | 20.000 (66.7%) |" in words  # no column for rank 2
