"""vLLM releases side by side on two hosts (the stand-in as 0.32.0, 0.33.0 and 0.34.0 under
/opt/vllm/, prepare.yml): a release that lacks an argument the unit passes is refused before
anything stops; a switch to another release removes the versions beyond those kept. Last in the
suite: it leaves the hosts on 0.33.0."""

from __future__ import annotations

import json

from conftest import FIRST
from testlib import UNIT, run_playbook

UNIT_FILE = f"/etc/systemd/system/{UNIT}.service"
MANIFEST = f"/var/lib/vllm-ops/last-good/{UNIT}/manifest.json"
# The sandbox's vllm_extra_args (inventory/sandbox/group_vars/vllm_servers/vllm.yml) without
# --reasoning-parser, which the stand-in's 0.33.0 does not have.
ARGS_FOR_0_33 = ["--trust-remote-code", "--tool-call-parser", "kimi_k2", "--enable-auto-tool-choice"]


def served_version(box) -> str:
    return json.loads(box.host.check_output("curl -sf http://127.0.0.1:8000/version"))["version"]


def test_a_release_without_an_argument_the_unit_passes_is_refused_before_anything_stops(hosts):
    pids = {name: box.main_pid() for name, box in hosts.items()}
    unit = hosts[FIRST].sha(UNIT_FILE)
    play = run_playbook("playbooks/deploy.yml", "-e", json.dumps({"vllm_version": "0.33.0"}))
    assert play.rc != 0
    message = play.result("Check the unit's arguments against the vLLM release that will run them")["msg"]
    assert message.startswith("vLLM 0.33.0 at /opt/vllm/0.33.0/bin/vllm does not take what the unit would pass: "
                              "--reasoning-parser is not an argument of this release"), message
    assert "Nothing was stopped" in message
    assert play.changed == 0, play.changed_tasks
    assert {name: box.main_pid() for name, box in hosts.items()} == pids
    assert hosts[FIRST].sha(UNIT_FILE) == unit
    assert served_version(hosts[FIRST]) == "0.32.0"


def test_a_switch_to_another_release_and_the_versions_kept(hosts):
    # Keep one version: once 0.33.0 is healthy, 0.32.0 (run before) goes; 0.34.0, never run, stays.
    play = run_playbook("playbooks/deploy.yml", "-e", json.dumps(
        {"vllm_version": "0.33.0", "vllm_extra_args": ARGS_FOR_0_33, "vllm_versions_keep": 1}))
    assert play.rc == 0, play.output[-4000:]
    for name, box in hosts.items():
        assert served_version(box) == "0.33.0", name
        assert box.argv()[1:3] == ["/opt/vllm/0.33.0/bin/vllm", "serve"], name
        record = json.loads(box.host.file(MANIFEST).content_string)
        assert record["record"]["version"] == "0.33.0" and record["record"]["venv_dir"] == "/opt/vllm/0.33.0"
        assert [h["version"] for h in record["history"]][-2:] == ["0.32.0", "0.33.0"], name
        assert not box.host.file("/opt/vllm/0.32.0").exists, name
        assert box.host.file("/opt/vllm/0.34.0/bin/vllm").exists, name
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks
