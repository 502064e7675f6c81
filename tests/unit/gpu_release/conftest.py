"""Fixtures for the gpu_release tests (helpers in gpu_release_helpers.py)."""

import json
import sys

import pytest

from gpu_release_helpers import FAKE_NVIDIA_SMI, Holders


@pytest.fixture
def holders():
    """Starts holder processes; whatever is left of them is killed afterwards."""
    started = Holders()
    yield started
    started.cleanup()


@pytest.fixture
def devices(tmp_path):
    """Two simulated per-GPU nodes, regular files named like the real ones."""
    paths = []
    for index in range(2):
        path = tmp_path / "dev" / ("nvidia%d" % index)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"")
        paths.append(path)
    return paths


@pytest.fixture
def fake_nvidia_smi(tmp_path):
    """``make(gpus, fail=False) -> path`` of an executable nvidia-smi stand-in."""
    state = tmp_path / "nvidia-smi.json"
    script = tmp_path / "bin" / "nvidia-smi"

    def make(gpus, fail=False):
        state.write_text(json.dumps({"gpus": gpus, "fail": fail}))
        script.parent.mkdir(exist_ok=True)
        script.write_text(FAKE_NVIDIA_SMI.format(python=sys.executable, state=str(state)))
        script.chmod(0o755)
        return str(script)

    return make
