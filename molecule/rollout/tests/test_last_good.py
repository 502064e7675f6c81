"""deploy.yml on three hosts with the host's last-known-good: a change that does not load is rolled
back on the first host and never reaches the others. (rollout.yml's own cases, and restore.yml
after a killed run: test_rollout.py.)"""

from __future__ import annotations

import json

from conftest import FIRST
from testlib import UNIT, run_playbook

UNIT_FILE = f"/etc/systemd/system/{UNIT}.service"
# The sandbox's settings (inventory/sandbox/group_vars/vllm_servers/vllm.yml), repeated here so
# that the test states what it changes.
EXTRA_ARGS = ["--trust-remote-code", "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2",
              "--enable-auto-tool-choice"]


def test_a_change_that_does_not_load_is_rolled_back_and_never_reaches_the_other_hosts(hosts):
    first = hosts[FIRST]
    others = {name: box.main_pid() for name, box in hosts.items() if name != FIRST}
    unit_before = first.sha(UNIT_FILE)
    first_pid = first.main_pid()
    # A value only the server refuses (its config check), after a restart: the load fails.
    change = {"vllm_extra_args": [*EXTRA_ARGS, "--max-num-seqs", "0"]}
    play = run_playbook("playbooks/deploy.yml", "-e", json.dumps(change))
    assert play.rc != 0
    assert play.data["stats"][FIRST]["failures"] == 1
    message = play.result("Fail, with the host back on its last-known-good")["msg"]
    assert f"rolled back: {FIRST} is back on its last-known-good (vLLM 0.32.0" in message, message
    assert "max_num_seqs" in message, "the failure names what the server refused, from its journal"
    # The first host runs its old unit again, restarted twice (the change, then the rollback) ...
    assert first.sha(UNIT_FILE) == unit_before
    assert "--max-num-seqs" not in first.argv()
    assert first.main_pid() != first_pid
    # ... and the others were never touched.
    for name, pid in others.items():
        assert name not in play.data["stats"] or play.data["stats"][name]["changed"] == 0, name
        assert hosts[name].main_pid() == pid, name
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks

