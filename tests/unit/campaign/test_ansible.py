"""Through Ansible on the controller: the report template, the filters, their ansible-doc pages."""

import importlib.util
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from campaign_helpers import REPO, ansible_env, ansible_tool, make_summary, rank_entry, write_json

TEMPLATE = REPO / "src" / "vllm_ops" / "templates" / "campaign_report.md.j2"
FILTER_NAMES = ("vllm_campaign_headline", "vllm_campaign_latency_stats", "vllm_campaign_duration",
                "vllm_campaign_downtime_text")


def _plugin_filters():
    spec = importlib.util.spec_from_file_location("vllm_campaign_filter_under_test",
                                                  REPO / "filter_plugins" / "vllm_campaign.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


FILTERS = _plugin_filters()


def test_filters_are_exported_and_thin(two_ranks):
    assert set(FILTERS) == set(FILTER_NAMES)
    assert FILTERS["vllm_campaign_headline"](two_ranks, "h", "r.md").endswith("skew-corrected 3.50 ms) -> r.md")
    assert FILTERS["vllm_campaign_latency_stats"]([1, 2, 3])["p50"] == 2.0
    assert FILTERS["vllm_campaign_duration"]("2025-01-31T12:00:00Z", "2025-01-31T12:01:01Z") == "1 min 1 s"
    assert FILTERS["vllm_campaign_downtime_text"]({"seconds_not_ready": 0, "gaps": 0}) == "downtime 0 s"


@pytest.mark.parametrize(("name", "args", "message"), [
    ("vllm_campaign_headline", ("text", "h"), "expected a trace summary"),
    ("vllm_campaign_headline", ({"ranks": []},), "missing 1 required positional argument"),
    ("vllm_campaign_latency_stats", ([1, "x"],), "latency #1 is 'x'"),
    ("vllm_campaign_duration", ("2025-01-31T12:00:00", "2025-01-31T12:00:01Z"), "has no time zone"),
])
def test_errors_name_the_filter(name, args, message):
    with pytest.raises(AnsibleFilterError, match=rf"^{name}: .*{message}"):
        FILTERS[name](*args)


def _render(tmp_path, campaign):
    dest = tmp_path / "report.md"
    variables = write_json(tmp_path / "vars.json", {"campaign": campaign})
    proc = subprocess.run(
        [str(ansible_tool("ansible")), "localhost", "-c", "local", "-i", "localhost,",
         "-m", "ansible.builtin.template", "-a", f"src={TEMPLATE} dest={dest} mode=0644",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"@{variables}"],
        capture_output=True, text=True, env=ansible_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dest.read_text()


def test_report_template(tmp_path, campaign):
    campaign["summary"]["allreduce"].update({"wait_ms_per_step_by_rank": {"0": 0.5, "1": 16.5}, "calls_matched": 610})
    campaign["summary"]["warnings"] = ["rank 1 (rank1.json.gz): 3 cudaGraphLaunch calls have | no activity"]
    text = _render(tmp_path, campaign)
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


def test_report_template_without_gpu_data(tmp_path):
    campaign = {"id": "c2", "host": "h", "started_at": "2025-01-31T12:00:00Z",
                "finished_at": "2025-01-31T12:00:42Z",
                "summary": make_summary([rank_entry(0, None)], warnings=["rank 0: no GPU kernels"]),
                "summary_json": "summary.json", "chart_png": "decode.png"}
    text = _render(tmp_path, campaign)
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


def test_report_of_a_real_cpu_campaign(tmp_path, cpu_summary):
    campaign = {"id": "c3", "host": "vllm-cpu", "started_at": "2025-01-31T12:00:00Z",
                "finished_at": "2025-01-31T12:01:00Z", "tensor_parallel_size": 1, "summary": cpu_summary,
                "summary_json": "summary.json", "chart_png": "decode.png"}
    text = _render(tmp_path, campaign)
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


def test_report_names_the_unmeasured_rank_of_a_mixed_campaign(tmp_path, two_ranks):
    summary = make_summary([*two_ranks["ranks"], rank_entry(2, None)], skew=3.5)
    campaign = {"id": "c4", "host": "h", "started_at": "2025-01-31T12:00:00Z",
                "finished_at": "2025-01-31T12:01:00Z", "summary": summary,
                "summary_json": "summary.json", "chart_png": "decode.png"}
    words = _words(_render(tmp_path, campaign))
    assert ("> h: all-reduce 57.1% of decode CUDA time (12.00 of 21.00 ms/step; skew-corrected 3.50 ms; "
            "2 of 3 ranks; rank 2 not measured: no GPU kernels)") in words
    assert ("Rank 2 has no GPU kernel events in its trace: GPU time and all-reduce share not measured there, so "
            "it is left out of the headline, the means and the skew correction rather than counted as zeros."
            ) in words
    assert "Rank 2: no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not " \
           "measured; left out of the figures above." in words
    assert "| allreduce | 4.000 (33.3%) | 20.000 (66.7%) |" in words  # no column for rank 2


def test_filters_in_a_playbook(tmp_path, two_ranks):
    summary = write_json(tmp_path / "summary.json", two_ranks)
    playbook = tmp_path / "play.yml"
    playbook.write_text(f"""
- name: Use the campaign filters
  hosts: localhost
  gather_facts: false
  vars:
    __summary: "{{{{ lookup('ansible.builtin.file', '{summary}') | from_json }}}}"
  tasks:
    - name: Compute
      ansible.builtin.set_fact:
        __headline: "{{{{ __summary | vllm_campaign_headline(inventory_hostname, 'artifacts/x/report.md') }}}}"
        __ttft: "{{{{ [40.0, 38.0, 45.0, 41.0] | vllm_campaign_latency_stats }}}}"
        __took: "{{{{ '2025-01-31T12:00:00Z' | vllm_campaign_duration('2025-01-31T12:14:07Z') }}}}"
    - name: Check
      ansible.builtin.assert:
        that:
          - "__headline == 'localhost: all-reduce 57.1% of decode CUDA time (12.00 of 21.00 ms/step; ' ~
             'skew-corrected 3.50 ms) -> artifacts/x/report.md'"
          - __ttft.count == 4 and __ttft.p50 == 40.5 and __ttft.max == 45.0
          - __took == '14 min 7 s'
    - name: Bad input fails naming the filter
      block:
        - name: Feed a string
          ansible.builtin.debug:
            msg: "{{{{ [1.0, 'slow'] | vllm_campaign_latency_stats }}}}"
      rescue:
        - name: Check the message
          ansible.builtin.assert:
            that: "'vllm_campaign_latency_stats: latency #1 is' in ansible_failed_result.msg"
""")
    proc = subprocess.run(
        [str(ansible_tool("ansible-playbook")), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)],
        capture_output=True, text=True, env=ansible_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed=0" in proc.stdout and "rescued=1" in proc.stdout


@pytest.mark.parametrize("name", FILTER_NAMES)
def test_ansible_doc(name):
    proc = subprocess.run([str(ansible_tool("ansible-doc")), "-t", "filter", name], capture_output=True, text=True,
                          env=ansible_env(), cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{name}.yml" in proc.stdout and "EXAMPLES" in proc.stdout and "RETURN" in proc.stdout


def test_sidecars_start_with_document_marker():
    for name in FILTER_NAMES:
        assert (REPO / "filter_plugins" / f"{name}.yml").read_text().startswith("---\n")
