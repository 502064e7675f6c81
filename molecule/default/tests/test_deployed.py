"""What an operator sees on a host after playbooks/deploy.yml."""

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import wait_for

UNIT = "vllm-kimi-k25-int4"
UNIT_FILE = f"/etc/systemd/system/{UNIT}.service"
ENV_FILE = f"/etc/vllm/{UNIT}.env"
SECRETS_FILE = f"/etc/vllm/{UNIT}.secrets.env"


def http_status(host, path, method="GET"):
    out = host.check_output(
        f"curl -s -o /dev/null -w '%{{http_code}}' -X {method} http://127.0.0.1:8000{path} || true"
    )
    return int(out or 0)


def exec_start_argv(host):
    """The arguments the running server got, from its /proc cmdline."""
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    argv = host.file(f"/proc/{pid}/cmdline").content_string.split("\0")
    return argv[argv.index("serve") - 1:]


def test_unit_file_is_root_owned_and_world_readable(host):
    unit = host.file(UNIT_FILE)
    assert unit.user == "root" and unit.group == "root"
    assert unit.mode == 0o644


def test_environment_file_carries_nccl_settings_and_is_not_world_readable(host):
    env = host.file(ENV_FILE)
    assert env.user == "root" and env.group == "vllm"
    assert env.mode == 0o640
    assert 'NCCL_ALGO="Ring"' in env.content_string
    assert 'NCCL_PROTO="LL"' in env.content_string
    assert 'NCCL_MAX_NCHANNELS="16"' in env.content_string


def test_secrets_file_is_root_only(host):
    secrets = host.file(SECRETS_FILE)
    assert secrets.user == "root" and secrets.mode == 0o600


def test_systemd_runs_the_intended_command(host):
    argv = exec_start_argv(host)
    assert argv[:3] == ["/opt/vllm-standin/bin/vllm", "serve", "/srv/models/kimi-k25-int4"]
    flags = " ".join(argv[3:])
    for expected in (
        "--host 0.0.0.0",
        "--port 8000",
        "--tensor-parallel-size 2",
        "--gpu-memory-utilization 0.95",
        "--max-model-len 16384",
        "--trust-remote-code",
    ):
        assert expected in flags
    assert "--profiler-config" not in argv


def test_unit_properties(host):
    props = host.service(f"{UNIT}.service").systemd_properties
    assert props["Type"] == "exec"
    assert props["Restart"] == "always"
    assert props["KillMode"] == "control-group"
    assert props["User"] == "vllm"
    assert props["SupplementaryGroups"] == "video"
    assert props["NoNewPrivileges"] == "yes"
    # One EnvironmentFiles= line per file (a dict keeps only the last).
    env_files = host.check_output(f"systemctl show {UNIT} -p EnvironmentFiles")
    assert ENV_FILE + " " in env_files and SECRETS_FILE + " " in env_files


def test_systemd_analyze_security_scores_the_unit_3_or_lower(host):
    # The figure an auditor reads; 4.5 before the hardening of the unit.
    out = host.check_output(f"systemd-analyze security --no-pager {UNIT}.service")
    (score,) = re.findall(r"Overall exposure level for \S+: (\d+\.\d+)", out)
    assert float(score) <= 3.0, out


def test_the_hardening_is_in_force(host):
    props = host.service(f"{UNIT}.service").systemd_properties
    for key, value in {"PrivateTmp": "yes", "RemoveIPC": "yes", "ProtectKernelTunables": "yes",
                       "ProtectKernelLogs": "yes", "ProtectHostname": "yes", "ProtectProc": "invisible",
                       "SystemCallErrorNumber": "1"}.items():
        assert props[key] == value, key
    assert sorted(props["RestrictAddressFamilies"].split()) == ["AF_INET", "AF_INET6", "AF_NETLINK", "AF_UNIX"]
    # The GPU-only part stays off until it is verified on a GPU host.
    assert props["DevicePolicy"] == "auto" and props["ProtectClock"] == "no"


def test_service_is_active_and_enabled(host):
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active"
    assert host.run(f"systemctl is-enabled {UNIT}").stdout.strip() == "enabled"


def test_health_answers_200_and_the_port_listens(host):
    assert http_status(host, "/health") == 200
    assert host.socket("tcp://0.0.0.0:8000").is_listening


def test_models_endpoint_serves_the_configured_name(host):
    models = json.loads(host.check_output("curl -sf http://127.0.0.1:8000/v1/models"))
    assert [m["id"] for m in models["data"]] == ["kimi-k2.5"]


def test_profiler_is_off_in_the_normal_service(host):
    assert not host.file(f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf").exists
    assert http_status(host, "/start_profile", "POST") == 404


@pytest.mark.parametrize("rank", [0, 1])
def test_each_gpu_is_held_by_its_worker_of_the_service(host, rank):
    pids = host.check_output(f"fuser /dev/nvidia{rank} 2>/dev/null || true").split()
    assert len(pids) == 1
    pid = pids[0]
    assert host.file(f"/proc/{pid}/cmdline").content_string.startswith(f"VLLM::Worker_TP{rank}")
    cgroup = host.file(f"/proc/{pid}/cgroup").content_string
    assert f"{UNIT}.service" in cgroup
    assert host.check_output(f"stat -c %U /proc/{pid}") == "vllm"


def test_the_service_records_the_shape_of_what_it_serves_and_nothing_of_its_words(host):
    """The traffic recorder, on by default: a user's completion (no x-vllm-ops-job header) becomes a line
    with its lengths; one of the project's own is counted, not recorded."""
    directory = "/var/lib/vllm/traffic"
    assert host.file(directory).user == "vllm" and host.file(directory).mode == 0o750
    prompt = "quokka marmalade obsidian fjord xylophone kumquat tundra"
    body = json.dumps({"model": "kimi-k2.5", "prompt": prompt, "max_tokens": 3})
    for header in ("", "-H 'x-vllm-ops-job: test'"):
        answer = json.loads(host.check_output(
            f"curl -sf {header} -H 'Content-Type: application/json' -d '{body}' http://127.0.0.1:8000/v1/completions"))
        assert answer["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10,
                                   "prompt_tokens_details": None, "completion_tokens_details": None}

    def recorded():
        text = host.check_output(f"cat {directory}/traffic-*.jsonl 2>/dev/null || true")
        return [json.loads(line) for line in text.splitlines()]

    def own():  # the sidecars' count of the project's own requests (folded in within a second of idling)
        paths = host.check_output(f"ls {directory}/traffic-*.json 2>/dev/null || true").split()
        return sum(json.loads(host.file(path).content_string)["own"] for path in paths)

    wait_for(lambda: [r for r in recorded() if r["input_length"] == 7] and own(),
             "the user's request recorded and the project's own counted", timeout_s=30)
    mine = [r for r in recorded() if r["input_length"] == 7]
    assert len(mine) == 1 and mine[0]["output_length"] == 3 and len(mine[0]["hash_ids"]) == 1
    assert own() >= 1
    everything = host.check_output(f"cat {directory}/*")
    assert not [word for word in prompt.split() if word in everything]
