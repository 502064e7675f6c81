"""The collection's module vllm_checkpoint, run by ansible-playbook with -c local (with its module_utils,
plugins/module_utils/checkpoint.py, which the controller reads as vllm_ops_host.checkpoint): what the host
returns is what the controller's reader returns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ops_host.checkpoint import read_checkpoint

from ledger_helpers import moe_checkpoint

REPO = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

pytestmark = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not next to this Python")

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - vllm_ops.serving.vllm_checkpoint:
        path: "{{ model_dir }}"
      register: out
    - ansible.builtin.copy:
        content: "{{ out | to_json }}"
        dest: "{{ result }}"
        mode: "0644"
"""


def run_module(tmp_path: Path, model_dir: Path) -> tuple[dict, str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), str(play), "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", "-e", f"model_dir={model_dir}",
         "-e", f"result={result}"],
        cwd=str(REPO), capture_output=True, text=True, check=False,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(result.read_text()), proc.stdout + proc.stderr


def test_the_module_returns_the_readers_record(tmp_path):
    moe_checkpoint(tmp_path / "kimi")
    out, _ = run_module(tmp_path, tmp_path / "kimi")
    assert out["changed"] is False
    assert out["checkpoint"] == read_checkpoint(str(tmp_path / "kimi"))


def test_a_model_given_by_name_is_no_failure(tmp_path):
    out, output = run_module(tmp_path, tmp_path / "moonshotai" / "Kimi-K2.5")
    assert set(out["checkpoint"]) == {"schema", "tool", "path", "error"}
    assert "not a directory" in out["checkpoint"]["error"]
    assert out["warnings"] == [f"no checkpoint figures: {out['checkpoint']['error']}"]
    assert "[WARNING]: no checkpoint figures" in output
