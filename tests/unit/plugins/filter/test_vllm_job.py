"""plugins/filter/vllm_job.py: the job skeleton's filter, thin, its errors naming it, in a playbook."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_ops.serving.plugins.filter import vllm_job

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent


FILTERS = vllm_job.FilterModule().filters()


def test_the_filter_is_exported_and_thin():
    assert set(FILTERS) == {"vllm_job_downtime_text"}
    said = FILTERS["vllm_job_downtime_text"]
    assert said({"seconds_not_ready": 0, "gaps": 0}) == "downtime 0 s"
    assert said({"seconds_not_ready": 17.25, "gaps": 2, "longest_gap_s": 9.14}) == (
        "downtime 17.2 s in 2 gaps (longest 9.1 s)")
    assert said(None) is None


def test_a_broken_record_fails_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match=r"^vllm_job_downtime_text: a downtime record needs "
                                                 r"seconds_not_ready and gaps"):
        FILTERS["vllm_job_downtime_text"]({"gaps": "x"})


def test_in_a_playbook(tmp_path):
    tool = BIN / "ansible-playbook"
    if not tool.exists():
        pytest.skip(f"{tool} not installed")
    playbook = tmp_path / "play.yml"
    playbook.write_text("""
- name: Use the job filter
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Check
      ansible.builtin.assert:
        that:
          - >-
            ({'seconds_not_ready': 8.26, 'gaps': 1} | vllm_ops.serving.vllm_job_downtime_text)
            == 'downtime 8.3 s in 1 gap'
""")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([str(tool), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(playbook)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed=0" in proc.stdout


def test_without_the_package_each_filter_is_there_and_says_what_to_install(monkeypatch):
    """An installed collection on a controller that lacks vllm_ops: the plugin still loads and names its
    filters, and a template that uses one is told what to install (not that the filter does not exist)."""
    monkeypatch.setitem(sys.modules, "vllm_ops.filters", None)  # import vllm_ops.filters now raises ImportError
    filters = vllm_job.FilterModule().filters()
    assert list(filters) == ["vllm_job_downtime_text"]
    with pytest.raises(AnsibleFilterError, match=r"^the filter vllm_job_downtime_text runs the vllm_ops Python package "
                                                 r"on the controller, and .* cannot import it .*: install the package"):
        filters["vllm_job_downtime_text"]({"seconds_not_ready": 1, "gaps": 1})
