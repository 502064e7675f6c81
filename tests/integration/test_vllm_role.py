"""The vllm role and the deploy/restore playbooks on a real systemd host.

Every test leaves the sandbox on the normal, healthy service.
"""

from __future__ import annotations

import json
import time

import pytest

from conftest import LOAD_S, UNIT

UNIT_FILE = f"/etc/systemd/system/{UNIT}.service"
ENV_FILE = f"/etc/vllm/{UNIT}.env"
DROPIN = f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf"
TRACE_DIR = "/var/lib/vllm/traces"
FAULT_DIR = "/run/vllm-standin"


@pytest.fixture
def restored(sandbox):
    """Run the test, then bring the host back with restore.yml."""
    yield sandbox
    sandbox.sh(f"rm -f {FAULT_DIR}/*", check=False)
    run = sandbox.playbook("playbooks/restore.yml")
    assert run.rc == 0, "restore.yml could not bring the sandbox back"


def wait_for(predicate, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def exec_start_argv(sandbox) -> list[str]:
    """The arguments the running server got, from its /proc cmdline."""
    pid = sandbox.prop("MainPID")
    argv = sandbox.sh(f"tr '\\0' '\\n' < /proc/{pid}/cmdline").splitlines()
    return argv[argv.index("serve") - 1:]


def test_restore_on_a_healthy_host_changes_nothing(sandbox):
    run = sandbox.playbook("playbooks/restore.yml")
    assert run.rc == 0
    assert run.recap()[sandbox.name]["changed"] == 0
    assert sandbox.sh(f"systemctl is-active {UNIT}") == "active"


def test_profiling_toggle_on_then_off(restored):
    box = restored
    before = box.prop("InvocationID")
    run = box.playbook("playbooks/deploy.yml", extra={"vllm_profiling_enabled": True})
    assert run.rc == 0
    assert box.prop("InvocationID") != before, "turning profiling on must restart the server"

    argv = exec_start_argv(box)
    config = json.loads(argv[argv.index("--profiler-config") + 1])
    assert config["profiler"] == "torch"
    assert config["torch_profiler_dir"] == TRACE_DIR
    assert argv[argv.index("--host") + 1] == "127.0.0.1", "the profiler must listen on loopback only"

    assert box.http("/start_profile", "POST") == 200
    assert box.http("/start_profile", "POST") == 409
    box.sh("curl -sf -o /dev/null http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' "
           "-d '{\"model\": \"kimi-k2.5\", \"prompt\": \"hi\", \"max_tokens\": 4}'")
    assert box.http("/stop_profile", "POST") == 200
    traces = box.sh(f"ls {TRACE_DIR}").split()
    assert any(t.endswith(".pt.trace.json.gz") and "rank0." in t for t in traces)
    assert any(t.endswith(".pt.trace.json.gz") and "rank1." in t for t in traces)
    box.sh(f"rm -f {TRACE_DIR}/*")

    # Off again: the drop-in is gone entirely and so are the endpoints.
    run = box.playbook("playbooks/restore.yml")
    assert run.rc == 0
    assert box.sh(f"test -e {DROPIN} && echo present || echo absent") == "absent"
    assert "50-variant.conf" not in box.sh(f"systemctl cat {UNIT}")
    assert "--profiler-config" not in exec_start_argv(box)
    assert box.http("/start_profile", "POST") == 404
    assert box.http("/health") == 200
    assert box.sh(f"systemctl is-active {UNIT}") == "active"


def server_environment(sandbox) -> dict[str, str]:
    """The running server's environment, from its /proc environ."""
    pid = sandbox.prop("MainPID")
    lines = sandbox.sh(f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_a_variant_is_applied_and_removed_entirely(restored):
    box = restored
    variant_env = f"/etc/vllm/{UNIT}.variant.env"
    # A drop-in of releases before variants: the role removes it.
    dropins = DROPIN.rsplit("/", 1)[0]
    box.sh(f"mkdir -p {dropins} && printf '[Service]\\n' > {dropins}/50-profiling.conf")
    variant = {"name": "LL128-no-algo", "environment": {"NCCL_PROTO": "LL128", "NCCL_ALGO": None},
               "extra_args": ["--max-num-seqs", "4"]}
    run = box.playbook("playbooks/deploy.yml", extra={"vllm_variant": variant})
    assert run.rc == 0, run.output
    env = server_environment(box)
    assert env["NCCL_PROTO"] == "LL128" and "NCCL_ALGO" not in env
    assert env["NCCL_MAX_NCHANNELS"] == "16", "the variant keeps what it does not change"
    # the variant's arguments after the normal ones, then the traffic recorder's (on by default)
    assert exec_start_argv(box)[-4:] == ["--max-num-seqs", "4", "--middleware", "vllm_ops_traffic.TrafficRecorder"]
    assert box.sh(f"ls {dropins}").split() == ["50-variant.conf"]
    assert box.http("/health") == 200

    run = box.playbook("playbooks/restore.yml")
    assert run.rc == 0
    assert box.sh(f"ls -A {dropins}") == ""
    assert box.sh(f"test -e {variant_env} && echo present || echo absent") == "absent"
    env = server_environment(box)
    assert env["NCCL_PROTO"] == "LL" and env["NCCL_ALGO"] == "Ring"
    assert "--max-num-seqs" not in exec_start_argv(box)
    assert box.playbook("playbooks/restore.yml").recap()[box.name]["changed"] == 0


def test_crash_during_load_fails_fast_with_the_journal(restored):
    box = restored
    box.sh(f"touch {FAULT_DIR}/engine-dies-during-load")
    # A changed environment restarts the server; its engine dies mid-load.
    run = box.playbook(
        "playbooks/deploy.yml",
        extra={
            "vllm_environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": 16,
                                 "VLLM_STANDIN_LOAD_S": LOAD_S, "CRASH_TEST": 1},
            "vllm_health_timeout_s": 900,
        },
    )
    assert run.rc != 0
    assert "Last journal lines" in run.output
    assert "Loading safetensors checkpoint shards" in run.output
    # It stopped on the crash, not on the 900 s budget.
    assert "was not healthy after" not in run.output


def test_restore_brings_back_a_server_whose_engine_died(sandbox):
    box = sandbox
    restarts = int(box.prop("NRestarts"))
    box.sh(f"touch {FAULT_DIR}/engine-dies")
    try:
        # vLLM answers 503, exits 0 and systemd restarts it, to die again.
        wait_for(lambda: int(box.prop("NRestarts")) > restarts, "systemd to restart the dead server")
    finally:
        box.sh(f"rm -f {FAULT_DIR}/engine-dies")
    run = box.playbook("playbooks/restore.yml")
    assert run.rc == 0
    assert box.sh(f"systemctl is-active {UNIT}") == "active"
    assert box.http("/health") == 200
    again = box.playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.recap()[box.name]["changed"] == 0


def test_restore_whose_last_known_good_executable_is_gone_changes_nothing_and_says_how_back(sandbox):
    box = sandbox
    exe, pid = "/opt/vllm-standin/bin/vllm", box.prop("MainPID")  # the sandbox's vllm_executable
    box.sh(f"mv {exe} {exe}.away")
    try:
        run = box.playbook("playbooks/restore.yml")
    finally:
        box.sh(f"mv {exe}.away {exe}")
    assert run.rc != 0
    output = " ".join(run.output.split())
    assert f"runs {exe}, which is no longer an executable file there, so it cannot be brought back" in output
    # what the host runs now (the server, started before, runs on), and the one way back for a fixed executable
    assert f"Nothing was changed: {UNIT}.service is active and its /health answers 200" in output
    assert f"put {exe} back (vllm_executable names it; this role does not install it), then run " \
           "ansible-playbook playbooks/restore.yml again" in output
    assert box.prop("MainPID") == pid
    again = box.playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.recap()[box.name]["changed"] == 0


def test_a_change_whose_last_known_good_does_not_load_either_says_the_host_is_down_and_how_back(sandbox):
    box = sandbox
    lkg_env = box.sh(f"cat {ENV_FILE}")
    change = {"vllm_environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": 16,
                                   "VLLM_STANDIN_LOAD_S": LOAD_S}}
    box.sh(f"touch {FAULT_DIR}/engine-dies-during-load")  # every load dies now, the last-known-good's too
    try:
        run = box.playbook("playbooks/deploy.yml", extra=change)
    finally:
        box.sh(f"rm -f {FAULT_DIR}/engine-dies-during-load")
    assert run.rc != 0
    output = " ".join(run.output.split())
    assert f"The change did not load on {box.name}, and neither did its last-known-good (" in output
    assert "the service is down, on the last-known-good's files" in output
    assert "Once that is fixed, ansible-playbook playbooks/restore.yml brings the last-known-good back" in output
    assert "Engine core initialization failed" in output  # why, from the journal
    assert box.http("/health") != 200 and box.sh(f"cat {ENV_FILE}") == lkg_env
    # the one command, once the host is fixed (here: the fault gone)
    back = box.playbook("playbooks/restore.yml")
    assert back.rc == 0 and box.http("/health") == 200
    assert 'NCCL_PROTO="LL"' in box.sh(f"cat {ENV_FILE}")


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"vllm_environment": {"NCCL_PROTO": "LLX"}},
         "vllm_environment.NCCL_PROTO is 'LLX': allowed values are LL, LL128, Simple"),
        ({"vllm_tensor_parallel_size": 0}, "vllm_tensor_parallel_size is 0: allowed values are a positive integer"),
        ({"vllm_tensor_parallel_size": "eight"}, "vllm_tensor_parallel_size"),
        ({"vllm_tensor_parallel_size": 4}, "vllm_tensor_parallel_size is 4 but vllm-it has 2 GPU device node(s)"),
        ({"vllm_model_path": "/srv/models/missing"}, "vllm_model_path '/srv/models/missing' is not a directory"),
        ({"vllm_model_path": ""}, "vllm_model_path is not set"),
        ({"vllm_profiling_trace_dir": "traces"}, "vllm_profiling_trace_dir is 'traces': it must be an absolute path"),
    ],
)
def test_bad_variables_fail_before_any_change(sandbox, extra, named):
    unit_before = sandbox.file_sum(UNIT_FILE)
    env_before = sandbox.file_sum(ENV_FILE)
    invocation = sandbox.prop("InvocationID")
    run = sandbox.playbook("playbooks/deploy.yml", extra=extra)
    assert run.rc != 0
    assert named in " ".join(run.output.split())
    assert run.recap()[sandbox.name]["changed"] == 0
    assert sandbox.file_sum(UNIT_FILE) == unit_before
    assert sandbox.file_sum(ENV_FILE) == env_before
    assert sandbox.prop("InvocationID") == invocation


def test_check_mode_shows_the_change_and_makes_none(sandbox):
    env_before = sandbox.file_sum(ENV_FILE)
    invocation = sandbox.prop("InvocationID")
    run = sandbox.playbook(
        "playbooks/deploy.yml", "--check", "--diff",
        extra={"vllm_environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_MAX_NCHANNELS": 16,
                                    "VLLM_STANDIN_LOAD_S": LOAD_S}},
    )
    assert run.rc == 0
    assert '+NCCL_PROTO="Simple"' in run.output
    assert run.recap()[sandbox.name]["changed"] > 0
    assert sandbox.file_sum(ENV_FILE) == env_before
    assert sandbox.prop("InvocationID") == invocation


def test_secrets_reach_the_server_but_not_the_unit_or_the_output(restored):
    box = restored
    key, token = "sk-integration-7f3a", "hf_integrationtoken9"
    run = box.playbook("playbooks/deploy.yml", "--diff", extra={"vllm_api_key": key, "vllm_hf_token": token})
    assert run.rc == 0
    assert key not in run.output and token not in run.output
    assert key not in box.sh(f"systemctl cat {UNIT}")
    assert key not in box.sh(f"cat {ENV_FILE}")
    assert key not in box.sh(f"journalctl -u {UNIT} --no-pager -n 500")
    assert box.http("/v1/models") == 401
    assert box.http("/v1/models", headers=(f"Authorization: Bearer {key}",)) == 200
