"""The job skeleton (roles/vllm_job) as every job meets it, on the sandbox."""

from __future__ import annotations

import json

import pytest

from conftest import LOCK
from testlib import UNIT, run_playbook


@pytest.mark.parametrize(("playbook", "old", "new"), [
    ("profile.yml", "vllm_campaign_lock_path", "vllm_job_lock_path"),
    ("playbooks/allreduce_bench.yml", "allreduce_bench_artifacts_dir", "allreduce_floor_artifacts_dir"),
])
def test_a_variable_of_an_earlier_release_is_refused_naming_its_new_name(host, playbook, old, new):
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    play = run_playbook(playbook, "-e", json.dumps({old: "/tmp/somewhere"}))
    assert play.rc != 0
    message = play.result("Check for variables that earlier releases used")["msg"]
    assert message == f"{old} was renamed {new}. Rename it in the inventory (or on the command line) and run again."
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be stopped"
    assert not host.file(LOCK).exists
