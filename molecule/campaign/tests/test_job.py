"""The job skeleton (roles/vllm_job) as every job meets it, on the sandbox."""

from __future__ import annotations

import json

import pytest

from testlib import LOCK, UNIT, run_playbook


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


def test_a_rollout_of_a_version_the_host_cannot_run_is_refused_before_anything_stops(host):
    # The sandbox runs the stand-in from a fixed vllm_executable, whatever vllm_version says (issue 37).
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    play = run_playbook("rollout.yml", "-e", json.dumps({"vllm_rollout_change": {"version": "0.0.1"}}))
    assert play.rc != 0
    message = play.result("Check the change")["msg"]
    assert message.startswith("vllm_rollout_change.version is 0.0.1, but this host runs /opt/vllm-standin/bin/vllm "
                              "whatever the version (its vllm_executable does not follow vllm_version and "
                              "vllm_install_enabled is false (nothing installs it)): it would keep running vLLM 0.32.0")
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be stopped"
    assert not host.file(LOCK).exists
