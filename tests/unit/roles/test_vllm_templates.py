"""The vllm role's templates rendered for the production example inventory.

Renders with Ansible's own template module on the controller (no host
needed), from the role defaults, the example inventory's overrides and the
role's derived vars, in that order of precedence.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles/vllm"
ANSIBLE = Path(sys.executable).parent / "ansible"


# What configure.yml passes the environment template for the unit's own file and the variant's.
UNIT_ENV = {"__vllm_env_title": "Environment of {{ __vllm_unit }}", "__vllm_env_values": "{{ __vllm_environment }}"}
VARIANT_ENV = {"__vllm_env_title": "the variant", "__vllm_env_values": "{{ __vllm_variant_environment }}"}


def render(tmp_path: Path, template: str, **extra) -> str:
    if template == "vllm.env.j2":
        extra = {**UNIT_ENV, **extra}
    dest = tmp_path / template.removesuffix(".j2")
    cmd = [
        str(ANSIBLE), "localhost", "-c", "local", "-i", "localhost,",
        "-e", f"ansible_python_interpreter={sys.executable}",
        "-e", f"@{ROLE / 'defaults/main.yml'}",
        "-e", f"@{ROOT / 'inventory/example/group_vars/vllm_servers/vllm.yml'}",
        "-e", f"@{ROLE / 'vars/main.yml'}",
        "-e", json.dumps(extra),
        "-m", "ansible.builtin.template",
        "-a", f"src={ROLE / 'templates' / template} dest={dest}",
    ]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dest.read_text()


def exec_start(unit_text: str) -> list[str]:
    """The last ExecStart= of a unit, continuations joined, split into words."""
    logical = unit_text.replace("\\\n", " ")
    line = [ln for ln in logical.splitlines() if ln.startswith("ExecStart=") and ln != "ExecStart="][-1]
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line.removeprefix("ExecStart="))]


@pytest.fixture(scope="module")
def unit(tmp_path_factory):
    return render(tmp_path_factory.mktemp("unit"), "vllm.service.j2")


def test_example_unit_runs_kimi_on_eight_gpus(unit):
    argv = exec_start(unit)
    # Each version in its own virtual environment, /opt/vllm/<version>/ (vllm_versions_dir).
    assert argv[:3] == ["/opt/vllm/0.32.0/bin/vllm", "serve", "/models/Kimi-K2.5-INT4"]
    options = dict(itertools.pairwise(argv[3:]))
    assert options["--tensor-parallel-size"] == "8"
    assert options["--gpu-memory-utilization"] == "0.95"
    assert options["--port"] == "8000"
    assert options["--max-model-len"] == "131072"
    for flag in ("--trust-remote-code", "--enable-auto-tool-choice"):
        assert flag in argv
    assert options["--tool-call-parser"] == "kimi_k2"
    assert "--profiler-config" not in argv


def test_example_unit_settings(unit):
    lines = set(unit.splitlines())
    for expected in (
        "Type=exec",
        "Restart=always",
        "KillMode=control-group",
        "User=vllm",
        "SupplementaryGroups=video",
        "EnvironmentFile=/etc/vllm/vllm-kimi-k25-int4.env",
        "EnvironmentFile=/etc/vllm/vllm-kimi-k25-int4.secrets.env",
        "TimeoutStopSec=180",
        "NoNewPrivileges=true",
    ):
        assert expected in lines
    assert not any(line.startswith("Environment=NCCL") for line in lines), "NCCL settings belong in the EnvironmentFile"


def test_example_environment_file_carries_the_nccl_settings(tmp_path):
    env = render(tmp_path, "vllm.env.j2")
    assert 'NCCL_ALGO="Ring"' in env.splitlines()
    assert 'NCCL_PROTO="LL"' in env.splitlines()
    assert 'NCCL_MAX_NCHANNELS="16"' in env.splitlines()


def test_secrets_file_holds_the_secrets_and_the_unit_does_not(tmp_path):
    secrets = render(tmp_path, "vllm.secrets.env.j2", vllm_api_key="sk-abc", vllm_hf_token="hf_xyz")
    assert 'VLLM_API_KEY="sk-abc"' in secrets.splitlines()
    assert 'HF_TOKEN="hf_xyz"' in secrets.splitlines()
    unit = render(tmp_path, "vllm.service.j2", vllm_api_key="sk-abc", vllm_hf_token="hf_xyz")
    assert "sk-abc" not in unit and "hf_xyz" not in unit


def test_profiling_dropin_arms_the_profiler_on_loopback(tmp_path):
    dropin = render(tmp_path, "50-variant.conf.j2", vllm_profiling_enabled=True,
                    vllm_profiler_config={"torch_profiler_with_stack": True, "max_iterations": 20})
    assert '# Variant "profiling" of vllm-kimi-k25-int4.service' in dropin
    assert "ExecStart=\n" in dropin, "the drop-in must clear the unit's ExecStart first"
    argv = exec_start(dropin)
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "8"
    config = json.loads(argv[argv.index("--profiler-config") + 1])
    assert config == {
        "profiler": "torch",
        "torch_profiler_dir": "/var/lib/vllm/traces",
        "torch_profiler_with_stack": True,
        "max_iterations": 20,
    }


def test_the_armed_unit_runs_the_profiler_bounded_behind_the_fence(tmp_path):
    argv = exec_start(render(tmp_path, "vllm.service.j2", vllm_profiler_armed=True))
    assert argv[argv.index("--host") + 1] == "0.0.0.0"  # it serves everyone; the fence guards the profiler
    assert argv[argv.index("--middleware") + 1] == "vllm_ops_fence.LoopbackFence"
    config = json.loads(argv[argv.index("--profiler-config") + 1])
    assert config["profiler"] == "torch" and config["torch_profiler_dir"] == "/var/lib/vllm/traces"
    assert config["max_iterations"] == 256 and config["torch_profiler_with_stack"] is False
    assert config["torch_profiler_use_gzip"] is True


def test_the_armed_environment_puts_the_fence_first_on_pythonpath(tmp_path):
    env = render(tmp_path, "vllm.env.j2", vllm_profiler_armed=True,
                 vllm_environment={"NCCL_PROTO": "LL", "PYTHONPATH": "/opt/site"})
    assert 'PYTHONPATH="/usr/local/lib/vllm-ops/python:/opt/site"' in env.splitlines()
    alone = render(tmp_path, "vllm.env.j2", vllm_profiler_armed=True, vllm_environment={"NCCL_PROTO": "LL"})
    assert 'PYTHONPATH="/usr/local/lib/vllm-ops/python"' in alone.splitlines()


def test_an_unarmed_unit_has_neither_profiler_nor_fence(unit, tmp_path):
    argv = exec_start(unit)
    assert "--profiler-config" not in argv and "vllm_ops_fence.LoopbackFence" not in argv
    quiet = exec_start(render(tmp_path, "vllm.service.j2", vllm_traffic_record=False))
    assert "--middleware" not in quiet
    assert "PYTHONPATH" not in render(tmp_path, "vllm.env.j2", vllm_traffic_record=False)


def middlewares(argv):
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == "--middleware"]


def test_the_normal_unit_records_its_traffic_and_the_armed_one_fences_it_too(unit, tmp_path):
    assert middlewares(exec_start(unit)) == ["vllm_ops_traffic.TrafficRecorder"]
    env = render(tmp_path, "vllm.env.j2").splitlines()
    assert {'PYTHONPATH="/usr/local/lib/vllm-ops/python"', 'VLLM_OPS_TRAFFIC_DIR="/var/lib/vllm/traffic"',
            'VLLM_OPS_TRAFFIC_MAX_MIB="512"', 'VLLM_OPS_TRAFFIC_BLOCK="64"'} <= set(env)
    armed = exec_start(render(tmp_path, "vllm.service.j2", vllm_profiler_armed=True))
    assert middlewares(armed) == ["vllm_ops_fence.LoopbackFence", "vllm_ops_traffic.TrafficRecorder"]
    variant = exec_start(render(tmp_path, "50-variant.conf.j2", vllm_variant={"name": "s", "extra_args": []}))
    assert middlewares(variant) == ["vllm_ops_traffic.TrafficRecorder"]
    profiled = exec_start(render(tmp_path, "50-variant.conf.j2", vllm_profiling_enabled=True))
    assert middlewares(profiled) == ["vllm_ops_traffic.TrafficRecorder"]


# --- Variants: the drop-in and the variant's environment file ---

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'
VARIANT = {"name": "ngram-nccl-defaults", "environment": {"NCCL_PROTO": "LL128", "NCCL_ALGO": None},
           "extra_args": ["--speculative-config", NGRAM, "--max-num-seqs", 64]}


def test_a_variant_changes_the_command_after_the_normal_arguments(tmp_path):
    extra = ["--trust-remote-code", "--max-num-seqs", "256"]
    normal = exec_start(render(tmp_path, "vllm.service.j2", vllm_extra_args=extra))
    dropin = render(tmp_path, "50-variant.conf.j2", vllm_extra_args=extra, vllm_variant=VARIANT)
    argv = exec_start(dropin)
    # The normal command, then the variant's arguments (argparse: the last --max-num-seqs wins), and the
    # traffic recorder last in both.
    recorder = ["--middleware", "vllm_ops_traffic.TrafficRecorder"]
    assert normal[-2:] == recorder
    assert argv == [*normal[:-2], "--speculative-config", NGRAM, "--max-num-seqs", "64", *recorder]
    assert "--profiler-config" not in argv
    assert "EnvironmentFile=/etc/vllm/vllm-kimi-k25-int4.variant.env" in dropin.splitlines()
    assert "UnsetEnvironment=NCCL_ALGO" in dropin.splitlines()


def test_the_variant_environment_is_the_normal_one_with_the_changes(tmp_path):
    env = render(tmp_path, "vllm.env.j2", vllm_variant=VARIANT, **VARIANT_ENV)
    lines = [line for line in env.splitlines() if not line.startswith("#")]
    # The example inventory's NCCL settings, NCCL_PROTO replaced and NCCL_ALGO gone.
    normal = [line for line in render(tmp_path, "vllm.env.j2").splitlines() if not line.startswith("#")]
    expected = sorted([line for line in normal if not line.startswith(("NCCL_PROTO=", "NCCL_ALGO="))]
                      + ['NCCL_PROTO="LL128"'])
    assert sorted(lines) == expected
    assert any(line.startswith("NCCL_ALGO=") for line in normal), "the example sets NCCL_ALGO: else no test"


def test_a_variant_of_an_armed_service_keeps_the_fence(tmp_path):
    argv = exec_start(render(tmp_path, "50-variant.conf.j2", vllm_profiler_armed=True,
                             vllm_variant={"name": "s", "extra_args": ["--max-num-seqs", "8"]}))
    assert argv[argv.index("--middleware") + 1] == "vllm_ops_fence.LoopbackFence"
    assert argv[argv.index("--host") + 1] == "0.0.0.0"
    env = render(tmp_path, "vllm.env.j2", vllm_profiler_armed=True,
                 vllm_variant={"name": "s", "extra_args": ["--max-num-seqs", "8"]}, **VARIANT_ENV)
    assert 'PYTHONPATH="/usr/local/lib/vllm-ops/python"' in env.splitlines()


def test_a_profiled_variant_listens_on_loopback_with_its_changes(tmp_path):
    argv = exec_start(render(tmp_path, "50-variant.conf.j2", vllm_variant={**VARIANT, "profile": True}))
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--profiler-config" in argv and "--speculative-config" in argv
