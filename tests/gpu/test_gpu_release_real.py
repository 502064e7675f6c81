"""Real-GPU check of playbooks/release_gpus.yml: runs run_gpu_release_check.py.

Skipped (so CI skips it) without nvidia-smi, an NVIDIA GPU or PyTorch. This test never
imports torch itself: the process running the playbook must not hold a GPU (see README.md).
"""

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_gpu_release_check.py")
SKIP = 77

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no nvidia-smi: no NVIDIA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="no PyTorch"),
]


def test_release_gpus_on_real_gpus():
    proc = subprocess.run([sys.executable, RUNNER], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    print(proc.stdout)
    if proc.returncode == SKIP:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stdout[-6000:]
