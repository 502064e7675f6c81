"""filter_plugins/vllm_trace.py: thin wrappers, errors that name the filter, docs, a playbook."""

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

REPO = Path(__file__).resolve().parents[4]
PLUGIN = REPO / "filter_plugins" / "vllm_trace.py"
BIN = Path(sys.executable).parent
STEP = "execute_context_0(0)_generation_1(1)"


def _load_plugin():
    spec = importlib.util.spec_from_file_location("vllm_trace_filter_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plugin = _load_plugin()
FILTERS = plugin.FilterModule().filters()


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



def test_the_filters_are_exported():
    assert set(FILTERS) == {"vllm_trace_summary", "vllm_trace_markdown", "vllm_trace_topology"}


def test_summary_of_a_directory_and_of_a_list(tmp_path):
    a = _write(tmp_path / "r0.json.gz", 0, allreduce_us=6.0)
    b = _write(tmp_path / "r1.json.gz", 1, allreduce_us=16.0)
    by_dir = FILTERS["vllm_trace_summary"](str(tmp_path), jobs=1)
    assert by_dir == FILTERS["vllm_trace_summary"]([a, b], jobs=1)
    assert [r["rank"] for r in by_dir["ranks"]] == [0, 1]
    assert by_dir["allreduce"]["ms_per_step_skew_corrected"] == 0.006
    assert by_dir["allreduce"]["wait_ms_per_step_by_rank"] == {"0": 0.0, "1": 0.01}


def test_options_are_passed_through(tmp_path):
    path = _write(tmp_path / "r0.json.gz", 0, world_size=1)
    s = FILTERS["vllm_trace_summary"](path, decode_pattern="^nothing$", top=1, categories={"mine": "nvjet"})
    assert s["ranks"][0]["decode_steps"] == 0 and s["decode_pattern"] == "^nothing$"
    s = FILTERS["vllm_trace_summary"](path, top=1, categories={"mine": "nvjet"})
    assert s["ranks"][0]["categories"]["mine"]["ms_per_step"] == 0.004
    assert len(s["ranks"][0]["top_kernels"]) == 1


def test_markdown(tmp_path):
    s = FILTERS["vllm_trace_summary"](_write(tmp_path / "r0.json.gz", 0, world_size=1))
    text = FILTERS["vllm_trace_markdown"](s)
    assert text.startswith("## Verdict\n") and "## Decode steps" in text and "| allreduce | 0.006 (60.0%) |" in text


@pytest.mark.parametrize(("name", "content", "message"), [
    (None, None, "directory holds no trace files"),
    ("missing.json.gz", None, "no such file or directory"),
    ("empty.json", b"", "empty.json: empty file"),
    ("bad.json", b"{nope", "bad.json: invalid JSON"),
    ("cut.json.gz", gzip.compress(b'{"traceEvents": [' * 50)[:30], "cut.json.gz: truncated gzip"),
])
def test_bad_input_raises_a_filter_error_naming_the_filter(tmp_path, name, content, message):
    target = tmp_path if name is None else tmp_path / name
    if content is not None:
        target.write_bytes(content)
    with pytest.raises(AnsibleFilterError, match=rf"^vllm_trace_summary: .*{message}"):
        FILTERS["vllm_trace_summary"](str(target))


@pytest.mark.parametrize(("value", "kwargs", "message"), [
    (42, {}, "expected a path or a list of paths, got int"),
    ([1, 2], {}, "expected a path or a list of paths"),
    (None, {}, "expected a path or a list of paths"),
    ("x", {"keep_going": "yes"}, "keep_going must be a boolean"),
    ("x", {"decode_pattern": "("}, "decode_pattern: invalid regular expression"),
])
def test_wrong_types(value, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=rf"^vllm_trace_summary: {message}"):
        FILTERS["vllm_trace_summary"](value, **kwargs)


def test_keep_going(tmp_path):
    _write(tmp_path / "r0.json.gz", 0)
    (tmp_path / "r1.json.gz").write_bytes(b"")
    with pytest.raises(AnsibleFilterError, match=r"r1\.json\.gz: empty file"):
        FILTERS["vllm_trace_summary"](str(tmp_path))
    s = FILTERS["vllm_trace_summary"](str(tmp_path), keep_going=True)
    assert [r["rank"] for r in s["ranks"]] == [0]


@pytest.mark.parametrize(("value", "message"), [
    ("text", "expected the dict vllm_trace_summary returns, got str"),
    ({}, "expected a trace summary"),
    ({"ranks": [{"categories": {"allreduce": 5}}]}, "malformed summary"),
])
def test_markdown_rejects_what_is_not_a_summary(value, message):
    with pytest.raises(AnsibleFilterError, match=rf"^vllm_trace_markdown: {message}"):
        FILTERS["vllm_trace_markdown"](value)


def _ansible_env():
    env = dict(os.environ, ANSIBLE_FILTER_PLUGINS=str(REPO / "filter_plugins"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    env.pop("ANSIBLE_CONFIG", None)
    return env


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
    topo = FILTERS["vllm_trace_topology"](text)
    assert topo["interconnect"] == interconnect and topo["links"] == links
    assert topo["gpus"] == (3 if links else 0)


def test_topology_bad_input():
    with pytest.raises(AnsibleFilterError, match="vllm_trace_topology: expected the text"):
        FILTERS["vllm_trace_topology"](["GPU0"])


def test_context_reaches_the_advisor(tmp_path):
    s = FILTERS["vllm_trace_summary"](_write(tmp_path / "r0.json.gz", 0, world_size=1),
                                      context={"interconnect": "pcie", "tensor_parallel_size": 8})
    assert s["context"]["interconnect"] == "pcie" and s["context"]["sources"]["interconnect"] == "given"
    assert s["context"]["tensor_parallel_size"] == 8
    with pytest.raises(AnsibleFilterError, match="vllm_trace_summary: context must be a mapping"):
        FILTERS["vllm_trace_summary"](str(tmp_path / "r0.json.gz"), context="pcie")


@pytest.mark.parametrize("name", ["vllm_trace_summary", "vllm_trace_markdown", "vllm_trace_topology"])
def test_ansible_doc(name):
    tool = BIN / "ansible-doc"
    if not tool.exists():
        pytest.skip(f"{tool} not installed")
    proc = subprocess.run([str(tool), "-t", "filter", name], capture_output=True, text=True, env=_ansible_env(),
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{name}.yml" in proc.stdout and "EXAMPLES" in proc.stdout and "RETURN" in proc.stdout


def test_filters_work_from_a_playbook(tmp_path):
    tool = BIN / "ansible-playbook"
    if not tool.exists():
        pytest.skip(f"{tool} not installed")
    traces = tmp_path / "traces"
    traces.mkdir()
    _write(traces / "r0.json.gz", 0, allreduce_us=6.0)
    _write(traces / "r1.json.gz", 1, allreduce_us=16.0)
    out = tmp_path / "summary.md"
    playbook = tmp_path / "play.yml"
    playbook.write_text(f"""
- name: Summarize traces
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Summarize
      ansible.builtin.set_fact:
        __s: "{{{{ '{traces}' | vllm_trace_summary }}}}"
    - name: Check the skew-corrected figure
      ansible.builtin.assert:
        that:
          - __s.allreduce.ms_per_step_skew_corrected == 0.006
          - __s.ranks | length == 2
    - name: Write the tables
      ansible.builtin.copy:
        content: "{{{{ __s | vllm_trace_markdown }}}}"
        dest: "{out}"
        mode: "0644"
""")
    proc = subprocess.run(
        [str(tool), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
         str(playbook)], capture_output=True, text=True, env=_ansible_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| allreduce |" in out.read_text()


CPU_TRACE = REPO / "tests" / "unit" / "traces" / "data" / "rank0.1796013877177788456.pt.trace.json.gz"
CPU_NOT_MEASURED = "no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not measured"


def test_cpu_trace_through_the_filters():
    s = FILTERS["vllm_trace_summary"](str(CPU_TRACE))
    assert s["gpu_time_measured"] is False and s["ranks_without_gpu_kernels"] == [0]
    r = s["ranks"][0]
    assert r["gpu_kernels"] == 0 and r["decode_steps"] == 15
    assert r["cuda_ms_per_step"] is None and r["allreduce_share"] is None
    text = FILTERS["vllm_trace_markdown"](s)
    assert f"Rank 0: {CPU_NOT_MEASURED}." in text and "CUDA ms/step" not in text


def test_cpu_trace_in_a_playbook_as_the_campaign_uses_it(tmp_path):
    """Summary, summary.json (to_nice_json) and headline, as roles/vllm_campaign/tasks/report.yml does."""
    tool = BIN / "ansible-playbook"
    if not tool.exists():
        pytest.skip(f"{tool} not installed")
    out = tmp_path / "summary.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(f"""
- name: Summarize a CPU-only trace
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Summarize
      ansible.builtin.set_fact:
        __s: "{{{{ '{CPU_TRACE}' | vllm_trace_summary }}}}"
    - name: Write the JSON summary
      ansible.builtin.copy:
        content: "{{{{ __s | to_nice_json }}}}\\n"
        dest: "{out}"
        mode: "0644"
    - name: Check
      ansible.builtin.assert:
        that:
          - not __s.gpu_time_measured
          - __s.ranks[0].cuda_ms_per_step is none
          - __s.ranks[0].decode_steps == 15
          - >-
            (__s | vllm_campaign_headline('vllm-cpu')) ==
            'vllm-cpu: no GPU kernels in the traces: all-reduce share not measured (15 decode steps; 1 warning)'
""")
    proc = subprocess.run(
        [str(tool), "-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
         str(playbook)], capture_output=True, text=True, env=_ansible_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = json.loads(out.read_text())
    assert written["ranks"][0]["cuda_ms_per_step"] is None and written["allreduce"]["share_mean"] is None
    assert '"cuda_ms_per_step": null' in out.read_text()
