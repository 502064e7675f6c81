"""Role vllm_bench's load as Ansible lays it together (-c local): the fleet's and a job's fields checked
by entry point checks, and entry point main sending the job's checked load whatever -e gives the fleet.

No server: main's benchmark fails at each point (its executable is /bin/false), which is enough to
see which points it was asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

pytestmark = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not next to this Python")

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: vllm_ops.serving.vllm_bench
        tasks_from: checks
      vars:
        vllm_bench_load_overrides: {"concurrencies": [2, 3], "repeats": 1}
        vllm_bench_load_overrides_name: vllm_tune_bench_load
        vllm_bench_check_host: false
    - ansible.builtin.debug:
        msg: "CHECKED {{ vllm_bench_checked_load | to_json }}"
    - ansible.builtin.include_role:
        name: vllm_ops.serving.vllm_bench
      vars:
        vllm_bench_label: baseline
        vllm_bench_slot: 00-baseline
        vllm_bench_round: 1
        vllm_bench_dir: "{{ job_dir }}"
        vllm_bench_host_dir: "{{ job_dir }}/host"
        vllm_bench_job_load: "{{ vllm_bench_checked_load }}"
      ignore_errors: true
"""


def run(tmp_path, **extra) -> tuple[int, str]:
    playbook = tmp_path / "bench.yml"
    playbook.write_text(PLAYBOOK)
    evars = {"job_dir": str(tmp_path / "job"), "vllm_executable": "/bin/false", "vllm_health_host": "127.0.0.1",
             "vllm_port": 9, "vllm_served_model_name": "m", "vllm_model_path": str(tmp_path), "vllm_api_key": "",
             **extra}
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run([str(ANSIBLE_PLAYBOOK), str(playbook), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(evars)],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_job_s_checked_load_is_what_main_sends_whatever_the_fleet_on_the_command_line(tmp_path):
    _rc, out = run(tmp_path, vllm_bench_load={"concurrencies": [9], "num_prompts": 16, "repeats": 4})
    checked = json.loads(out.split("CHECKED ", 1)[1].split('"\n', 1)[0].replace('\\"', '"'))
    # The job's concurrencies and repeats over the fleet's num_prompts over the role's defaults.
    assert (checked["concurrencies"], checked["repeats"], checked["num_prompts"], checked["input_len"]) == \
        ([2, 3], 1, 16, 1024), out
    # main benchmarked the job's two points, once each, not the fleet's concurrency 9 four times.
    assert "baseline: concurrency 2, run 1/1" in out and "baseline: concurrency 3, run 1/1" in out, out
    assert "concurrency 9" not in out, out


def test_a_wrong_field_stops_the_checks_naming_its_variable(tmp_path):
    rc, out = run(tmp_path, vllm_bench_load={"num_prompts": 2})
    assert rc != 0
    assert ("vllm_bench_load.num_prompts (2) must be at least the highest of vllm_tune_bench_load.concurrencies (3)"
            in out), out
