"""Through Ansible on the controller: the campaign filters and their ansible-doc pages (the report's
template renders without Ansible: test_report.py)."""

import importlib.util
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError

from campaign_helpers import REPO, ansible_env, ansible_tool, write_json

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
