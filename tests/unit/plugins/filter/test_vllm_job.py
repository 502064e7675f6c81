"""filter_plugins/vllm_job.py: the job skeleton's filter, thin, its errors naming it, in a playbook."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent


def _filters():
    spec = importlib.util.spec_from_file_location("vllm_job_filter_under_test", REPO / "filter_plugins" / "vllm_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


FILTERS = _filters()


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
          - "({'seconds_not_ready': 8.26, 'gaps': 1} | vllm_job_downtime_text) == 'downtime 8.3 s in 1 gap'"
""")
    env = dict(os.environ, ANSIBLE_FILTER_PLUGINS=str(REPO / "filter_plugins"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    env.pop("ANSIBLE_CONFIG", None)
    proc = subprocess.run([str(tool), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(playbook)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed=0" in proc.stdout
