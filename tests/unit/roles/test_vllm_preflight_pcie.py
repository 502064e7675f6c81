"""The vllm role's preflight reads the PCIe link widths (vllm_pcie_link_check), with -c local.

The nvidia-smi stand-in plays the host's tool on simulated GPUs, its fault switch trains GPU 1's
link at x4. This machine has no /dev/nvidiaN, so the preflight always stops afterwards at its
tensor-parallel check: a run that reaches that check went past the link check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
NVIDIA_SMI = REPO / "molecule/resources/standin/nvidia_smi.py"
ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")
PAST_THE_CHECK = "vllm_tensor_parallel_size is 2 but localhost has 0 GPU device node(s)"
NAMED = "PCIe link of GPU 1 (00000000:2A:00.0, rank 1) at x4 of x16 (25% of its bandwidth)"

pytestmark = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook is not next to this Python")


@pytest.fixture
def host(tmp_path):
    """A playbook running the preflight on localhost against two simulated GPUs; ``play(**vars)``."""
    (tmp_path / "dev").mkdir()
    for index in range(2):
        (tmp_path / "dev" / f"nvidia{index}").touch()
    (tmp_path / "faults").mkdir()
    (tmp_path / "model").mkdir()
    playbook = tmp_path / "preflight.yml"
    preflight = ("    - ansible.builtin.include_role:\n"
                 "        name: vllm_ops.serving.vllm\n        tasks_from: preflight\n")
    playbook.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + preflight + preflight)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               GPU_SIM_DEVICE_GLOB=str(tmp_path / "dev" / "nvidia[0-9]*"), GPU_SIM_CLAIM_DIR=str(tmp_path / "claims"),
               VLLM_STANDIN_FAULT_DIR=str(tmp_path / "faults"))

    def play(*args, **extra):
        evars = {"vllm_model_path": str(tmp_path / "model"), "vllm_tensor_parallel_size": 2,
                 "vllm_nvidia_smi": str(NVIDIA_SMI), **extra}
        cmd = [str(ANSIBLE_PLAYBOOK), str(playbook), "-i", "localhost,", "-c", "local",
               "-e", f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(evars), *args]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
        return proc.returncode, proc.stdout + proc.stderr

    play.faults = tmp_path / "faults"
    return play


def test_a_narrow_link_is_a_warning_naming_gpu_and_rank_once_and_the_run_goes_on(host):
    (host.faults / "pcie-link-degraded").write_text("1\n")
    rc, out = host()
    assert rc == 2, out
    assert out.count(NAMED) == 1, out  # said once, though the preflight ran twice
    assert "vllm_pcie_link_check: error would fail the run on this" in out
    assert PAST_THE_CHECK in out


def test_error_mode_refuses_the_narrow_link_before_anything_else(host):
    (host.faults / "pcie-link-degraded").write_text("1\n")
    rc, out = host(vllm_pcie_link_check="error")
    assert rc == 2, out
    assert f"{NAMED}, read at deploy, GPUs idle: the width only is judged. vllm_pcie_link_check is error" in out
    assert PAST_THE_CHECK not in out


def test_healthy_links_say_nothing_and_check_mode_reads_them_too(host):
    rc, out = host("--check", vllm_pcie_link_check="error")
    assert rc == 2 and PAST_THE_CHECK in out, out
    assert "PCIe link of GPU" not in out and "PCIe links of localhost not checked" not in out
    assert "TASK [vllm_ops.serving.vllm : Read the GPUs' PCIe link widths]" in out


@pytest.mark.parametrize("mode", ["error", "warn"])
def test_no_nvidia_smi_is_not_checked_said_once_never_a_failure(host, mode):
    rc, out = host(vllm_nvidia_smi="/no/such/nvidia-smi", vllm_pcie_link_check=mode)
    assert rc == 2, out
    said = "PCIe links of localhost not checked: nvidia-smi could not be run on the host (not found, or not executable)"
    assert out.count(said) == 1, out
    assert PAST_THE_CHECK in out


@pytest.mark.parametrize("off", ["off", False])  # YAML's bare off arrives as false
def test_off_reads_nothing(host, off):
    (host.faults / "pcie-link-degraded").write_text("1\n")
    rc, out = host(vllm_pcie_link_check=off)
    assert rc == 2 and PAST_THE_CHECK in out, out
    assert NAMED not in out and "PCIe links of localhost not checked" not in out


def test_a_bad_mode_is_refused_naming_the_variable(host):
    rc, out = host(vllm_pcie_link_check="warning")
    assert rc == 2
    assert "vllm_pcie_link_check is 'warning': allowed values are warn, error and off." in out
